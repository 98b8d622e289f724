"""Injection payloads a workload could put in a report: (family, payload). Each one that can run
script calls alert() with its own family name, and each one that can fetch points at a
documentation-only address (203.0.113.0/24), so a browser test can tell which one got through."""

PAYLOADS = [
    ("script tag", "<script>alert('script tag')</script>"),
    (
        "event handler",
        "<img src=x onerror=\"alert('event handler')\"><b onmouseover=alert(1)>b</b>",
    ),
    ("javascript link", "[click](javascript:alert('javascript link'))"),
    ("vbscript link", "[vb](vbscript:msgbox('vbscript link'))"),
    ("data link", "[d](data:text/html;base64,PHNjcmlwdD5hbGVydCgnZGF0YScpPC9zY3JpcHQ+)"),
    (
        "obfuscated scheme",
        "[a](JaVaScRiPt:alert('obfuscated scheme')) <a href=' java\tscript:alert(2)'>b</a>",
    ),
    ("entity-encoded scheme", "<a href=\"&#106;avascript:alert('entity-encoded scheme')\">e</a>"),
    ("scheme-relative image", "![i](//203.0.113.7/scheme-relative.png)"),
    ("remote or relative image", "![u](HTTPS://203.0.113.7/u.png) <img src='local.png'>"),
    ("svg", "<svg onload=\"alert('svg')\"><image href='//203.0.113.7/svg.png'/></svg>"),
    ("css url", '<div style="background:u\\72l(//203.0.113.7/css.png)">css</div>'),
    ("css import", "<style>@import '//203.0.113.7/x.css'; a{color:red}</style>"),
    (
        "embedded document",
        "<iframe src='//203.0.113.7/f'></iframe><object data='//203.0.113.7/o'></object>"
        "<embed src='//203.0.113.7/e'><form action='//203.0.113.7/a'><button>x</button></form>",
    ),
    (
        "refresh or base",
        "<meta http-equiv='refresh' content='0;url=//203.0.113.7/r'><base href='//203.0.113.7/'>",
    ),
    (
        "form action on a button",
        "<form><button formaction=\"javascript:alert('form action on a button')\">go</button>"
        "<input type=image src='//203.0.113.7/input.png'></form>",
    ),
    (
        "parser mutation",
        "<math><mtext><table><mglyph><style><img src=x "
        "onerror=\"alert('parser mutation')\"></style></mglyph></table></mtext></math>",
    ),
    (
        "media and preload",
        "<video poster='//203.0.113.7/poster.png'><source src='//203.0.113.7/v.mp4'></video>"
        "<link rel=preload href='//203.0.113.7/p.css' as=style><audio src='//203.0.113.7/a.mp3'>",
    ),
    (
        "srcdoc and template",
        "<iframe srcdoc=\"<script>alert('srcdoc and template')</script>\"></iframe>"
        "<template><img src=x onerror=\"alert('srcdoc and template')\"></template>",
    ),
]
