"""Text the workbook writes, made safe: no secret and no terminal control sequence gets through.

Policy (../reference: methods.md a5): store only environment variables that change behaviour
(allowlist by name), blank those whose name suggests a secret, scan the kept values for
credential shapes and high-entropy tokens. `scrub_text` is the last pass over finished text:
one compiled pattern for secret-named environment values, token shapes, secret-named flags,
assignments and query parameters, and `user:password@`; README "Secrets" lists what it catches
and what it does not.

Text from user code is also made safe for a terminal, a log file, a JSON field or the index
page (`strip_control`): colours are harmless, but CSI and OSC escape sequences can move the
cursor, rewrite earlier console lines, set the window title or plant hyperlinks, and
bidirectional-override characters can make a line read differently from what it contains.
Every such sequence is removed; the text stays. `console_line` does both passes.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Mapping
from functools import lru_cache

REDACTED = "[redacted]"

_SECRET_WORDS = re.compile(
    r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|AUTH|SESSION|COOKIE|PRIVATE"
    # AZURE_STORAGE_CONNECTION_STRING, DATABASE_CONN_STR: the string carries the account key.
    r"|CONNECTION[_-]?STRING|CONN[_-]?STR",
    re.IGNORECASE,
)
# Names that contain a secret word but hold well-known public content. Blanking them loses a
# setting that matters (tokenizer threads); scrubbing their values would also rewrite common
# words such as "ubuntu" or "wayland" across every report.
_PUBLIC_NAMES = frozenset(
    {
        "TOKENIZERS_PARALLELISM",
        "SSH_AUTH_SOCK",
        "XDG_SESSION_CLASS",
        "XDG_SESSION_DESKTOP",
        "XDG_SESSION_ID",
        "XDG_SESSION_TYPE",
    }
)

# Variables that change what torch, the Neuron compiler/runtime, BLAS/OpenMP, the allocator or
# pip do. Everything else in the environment is never stored.
_BEHAVIOUR_PREFIXES = (
    "NEURON_",
    "XLA_",
    "TORCH_",  # includes TORCH_NEURONX_*, TORCH_DEVICE_BACKEND_AUTOLOAD, TORCH_LOGS
    "TORCHINDUCTOR_",
    "TORCHDYNAMO_",
    "PYTORCH_",
    "PJRT_",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "CUDA_",
    "CUBLAS_",
    "NCCL_",
    "FI_",
    "MALLOC_",
)
_BEHAVIOUR_NAMES = frozenset(
    {
        "TOKENIZERS_PARALLELISM",
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "PYTHONHASHSEED",
    }
)

# Credential shapes that are unambiguous on their own, so they are safe to search for in any
# text, including multi-MB notebooks with embedded images. Each alternative starts with a literal
# prefix, so the engine rejects almost every position after one character.
_AWS_KEY_ID = r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}"
_KNOWN_TOKEN = re.compile(
    "|".join(
        (
            _AWS_KEY_ID,
            r"AIza[0-9A-Za-z_-]{35}",  # Google API key
            r"hf_[A-Za-z0-9]{30,}",  # Hugging Face
            r"gh[pousr]_[A-Za-z0-9]{36,}",  # GitHub
            r"github_pat_[A-Za-z0-9_]{22,}",
            # OpenAI, Anthropic and Stripe-style secret keys (sk-..., sk_live_..., rk_live_...):
            # at least one digit, so a snake_case name that starts with "sk_" is left alone.
            r"(?<![A-Za-z0-9])(?:sk|rk)[-_](?=[A-Za-z_-]{0,100}[0-9])[A-Za-z0-9_-]{20,}",
            r"xox[abposre]-[A-Za-z0-9-]{10,}",  # Slack tokens
            r"xapp-[0-9]-[A-Za-z0-9-]{10,}",
            r"hooks\.slack\.com/services/[A-Za-z0-9_/]+",  # Slack webhook URL
            r"glpat-[A-Za-z0-9_-]{20,}",  # GitLab personal access token
            r"ya29\.[A-Za-z0-9_-]{20,}",  # Google OAuth access token
            r"dapi[0-9a-f]{32}(?:-[0-9]+)?",  # Databricks personal access token
            # Discord webhook URLs (discord.com and discordapp.com): the id and its token.
            r"discord(?:app)?\.com/api/webhooks/[0-9]+/[A-Za-z0-9_-]+",
            r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",  # JWT
            # A PEM private key, whole; a truncated one loses everything that looks like its body.
            r"-----BEGIN[A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[\s\S]{0,20000}?-----END[A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"|[A-Za-z0-9+/=\s\\\",]*)",
            r"(?i:\b(?:bearer|basic)[ \t]+)[A-Za-z0-9._~+/-]{16,}=*",  # Authorization values
        )
    )
)

# Names under which a value is a secret whatever it looks like: the last part of a flag
# (--db-password x, --hf-token=x), of an assignment (PGPASSWORD=x, api_key=x) or of a URL's query
# parameter (?access_token=x&...). Only the value is replaced, so the text stays readable.
_SECRET_WORDS_IN_NAMES = (
    # Unambiguous words may end a longer name (PGPASSWORD); short ones must be a whole part
    # (--hf-token, but not --bypass or --max-tokens).
    r"[A-Za-z0-9]*(?:password|passwd|passphrase|secret)|pwd|pass|token|api[-_]?key|apikey"
    r"|access[-_]?key|secret[-_]?key|private[-_]?key|credentials?|signature|sig|auth"
    # Azure connection strings (AccountKey=...;), Service Bus and Event Hubs
    # (SharedAccessKey=...;) and `az --account-key`.
    r"|account[-_]?key|shared[-_]?access[-_]?key"
)
_SECRET_KEYWORD = f"(?i:{_SECRET_WORDS_IN_NAMES})"
_SECRET_FLAG = (
    r"(?<![\w-])(?P<flag>--?(?:[A-Za-z0-9]+[-_])*" + _SECRET_KEYWORD + r")(?P<flag_sep>=|[ \t]+)"
    r"(?P<flag_value>(?![-\s])[^\s\"'<>&\\]+)"
)
# "==" is a version pin (tokenizers==0.21) and "=(" a call, not a secret.
_SECRET_ASSIGNMENT = (
    # The lookahead (possessive, so it never backtracks) skips, in one scan, every word that is
    # not followed by "=": base64 image data would otherwise be searched for names at length.
    r"(?<![\w.-])(?=[\w.-]{1,80}+=)(?P<name>(?:[A-Za-z0-9]+[-_.])*" + _SECRET_KEYWORD + r")="
    r"(?P<name_value>(?![=\s(])[^\s\"'<>&),;\\]+)"
)
# `name: value` and `name = value` in the syntaxes secrets are kept in: INI and
# ~/.aws/credentials (`aws_secret_access_key = x`), YAML (`password: x`), JSON and a printed
# Python dict (`"api_key": "x"`, `{'token': 'x'}`, also HTML-escaped), shell (`PGPASSWORD="x"`),
# docker's config (`"auth": "x"`) and HTTP headers (`Authorization: token x`, the scheme word kept).
# A quoted value is replaced up to its closing quote, spaces included.
_QUOTE = r"(?:[\"'`]|&quot;|&\#39;|&\#x27;)"
# Unquoted, a short word ("pass: 3 of 4", "token: 12 ms") is ordinary prose: it names a secret
# only after another part of a name (hf_token, db-pass) or inside quotes ("token": ...).
_UNAMBIGUOUS_SECRET_NAME = (
    r"(?i:(?:[A-Za-z0-9]+[-_.])*(?:[A-Za-z0-9]*(?:password|passwd|passphrase|secret)"
    r"|api[-_]?key|apikey|access[-_]?key|secret[-_]?key|private[-_]?key|credentials?"
    r"|account[-_]?key|shared[-_]?access[-_]?key|authorization)"
    r"|(?:[A-Za-z0-9]+[-_.])+(?:token|auth|pass|pwd|sig|signature))"
)
_AFTER_QUOTE = r"(?:(?<=[\"'`])|(?<=&quot;)|(?<=&\#39;)|(?<=&\#x27;))"
_SECRET_PAIR = (
    # Possessive look-ahead, as in _SECRET_ASSIGNMENT: one scan past words not followed by a
    # separator, so long runs of text are not searched for names from every position.
    r"(?<![\w.-])(?=[\w.-]{1,80}+" + _QUOTE + r"?[ \t]*[:=])"
    r"(?P<pair_key>(?:"
    + _AFTER_QUOTE
    + r"(?:[A-Za-z0-9]+[-_.])*(?i:"
    + _SECRET_WORDS_IN_NAMES
    + r"|authorization)"
    + _QUOTE
    + r"|"
    + _UNAMBIGUOUS_SECRET_NAME
    + _QUOTE
    + r"?)"
    r"[ \t]*(?:=|:(?![:/]))[ \t]*(?i:(?:token|bearer|basic|digest)[ \t]+)?)"
    r"(?:(?P<pair_quote>" + _QUOTE + r")(?P<pair_quoted>[^\"'`&\n]{1,512})(?P=pair_quote)"
    # An unquoted value that is itself followed by a separator is the next pair's name
    # ("credentials: aws_secret_access_key = x"): that pair is the one to replace.
    r"|(?P<pair_value>(?![=\s(\[{])[^\s\"'<>&),;\\]{1,512}+(?![ \t]*[:=])))"
)
# npm's .npmrc: `//registry.npmjs.org/:_authToken=npm_...`, `_auth=base64`, `_password=...`. The
# leading underscore keeps these out of the assignment pattern's names.
_NPMRC = r"(?P<npmrc>(?<![\w])_(?i:authToken|auth|password)[ \t]*=[ \t]*)[^\s\"'<>]{1,512}"
# `curl -u user:password` (also --user, --proxy-user, -U): the login stays, the password goes. A
# uid:gid pair (`docker run -u 1000:1000`) is all digits and is left alone.
_USER_FLAG = (
    r"(?<![\w-])(?P<user_flag>(?:-u|-U|--user|--proxy-user)(?:[ \t]+|=)[\"']?"
    r"(?![0-9]{1,10}:[0-9]{1,10}(?![^\s\"']))[^\s:\"']{1,256}:)[^\s\"']{1,512}"
)
# A ~/.netrc line: `machine HOST login USER password SECRET`.
_NETRC = r"(?P<netrc>\blogin[ \t]+\S{1,256}[ \t]+(?:password|passwd)[ \t]+)\S{1,512}"
_URL_USERINFO = (
    # Scheme length is bounded so a long run of letters (base64 image data) is not rescanned
    # from every position; userinfo runs to the last "@" before the host and is bounded too.
    r"\b(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,30}://)[^/\s\"'<>]{1,512}@"
)
# `user:password@host` without a scheme (scp-style remotes, proxy settings). mailto: is an
# address, not a login.
_BARE_USERINFO = (
    r"(?<![\w.%+:-])(?!mailto:)(?P<user>[A-Za-z0-9._%+-]{1,64}):[^\s@/\"'<>:]{1,256}@"
    r"(?=[A-Za-z0-9])"
)
_STRUCTURED_SECRETS = (
    _URL_USERINFO,
    _BARE_USERINFO,
    _SECRET_FLAG,
    _SECRET_ASSIGNMENT,
    _SECRET_PAIR,
    _NETRC,
    _NPMRC,
    _USER_FLAG,
)

# High-entropy candidates. "/", "." and ":" are not token characters, so paths and version
# strings split into short pieces and are never candidates; the cost is that a base64 secret
# containing "/" (an AWS secret access key) is only caught by its variable name.
# Below 32 characters, entropy no longer separates random tokens from long identifiers.
_BASE64_TOKEN = re.compile(r"[A-Za-z0-9+_-]{32,}={0,2}")
_HEX_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:[0-9a-f]{32,}|[0-9A-F]{32,})(?![A-Za-z0-9])")
# Thresholds measured on 20,000 random tokens of 32 characters: from a 64-symbol alphabet,
# 99.99 % score >= 4.0 bits/char (median 4.56); from hex, 99.99 % score >= 3.0 (median 3.63).
# Longer random tokens score higher still. Words, snake_case flags and repeated patterns score
# lower, and base64 candidates must also mix upper case, lower case and digits, which flags
# and paths seldom do and random tokens of this length almost always do.
_BASE64_MIN_ENTROPY = 4.0
_HEX_MIN_ENTROPY = 3.0


@lru_cache(maxsize=4096)  # scrub_text asks about every variable of the environment, every call
def is_secret_name(name: str) -> bool:
    """True when a variable's name suggests it holds a credential."""
    return name.upper() not in _PUBLIC_NAMES and bool(_SECRET_WORDS.search(name))


def _shannon_entropy(text: str) -> float:
    counts = Counter(text)
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in counts.values())


def _is_random_base64(token: str) -> bool:
    body = token.rstrip("=")
    mixes_classes = (
        any(c.isupper() for c in body)
        and any(c.islower() for c in body)
        and any(c.isdigit() for c in body)
    )
    return mixes_classes and _shannon_entropy(body) >= _BASE64_MIN_ENTROPY


def _redact_high_entropy(text: str) -> str:
    text = _HEX_TOKEN.sub(
        lambda m: REDACTED if _shannon_entropy(m.group()) >= _HEX_MIN_ENTROPY else m.group(),
        text,
    )
    return _BASE64_TOKEN.sub(
        lambda m: REDACTED if _is_random_base64(m.group()) else m.group(), text
    )


def strip_url_userinfo(text: str) -> str:
    """Replace `user:password@` in every URL of `text` (pip index URLs, git remotes)."""
    return _USERINFO_ONLY.sub(_replace_match, text)


def redact_value(text: str) -> str:
    """Everything `scrub_text` replaces, plus high-entropy tokens (for short values only)."""
    return _redact_high_entropy(scrub_text(text, {}))


def looks_secret_value(value: str) -> bool:
    """True when `value` contains an access key id, a known token shape or a random token."""
    return redact_value(value) != strip_url_userinfo(value)


def _is_behaviour_variable(name: str) -> bool:
    return name in _BEHAVIOUR_NAMES or name.startswith(_BEHAVIOUR_PREFIXES)


def redact_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The behaviour-changing variables of `environ`, with every secret blanked, sorted by name."""
    kept = {}
    for name in sorted(environ):
        if not _is_behaviour_variable(name):
            continue
        kept[name] = REDACTED if is_secret_name(name) else redact_value(environ[name])
    return kept


def _replace_match(match: re.Match[str]) -> str:
    """Keep what says where the secret was (scheme, flag, name); replace the secret itself."""
    groups = match.groupdict()
    if groups.get("scheme"):
        return f"{groups['scheme']}{REDACTED}@"
    if groups.get("user"):
        return f"{REDACTED}@"
    if groups.get("flag"):
        return f"{groups['flag']}{groups['flag_sep']}{REDACTED}"
    if groups.get("name"):
        return f"{groups['name']}={REDACTED}"
    if groups.get("pair_key"):
        quote = groups.get("pair_quote") or ""
        return f"{groups['pair_key']}{quote}{REDACTED}{quote}"
    # The rest keep everything before the secret: a .netrc or .npmrc key, a --user flag.
    kept = next((groups[g] for g in ("netrc", "npmrc", "user_flag") if groups.get(g)), "")
    return f"{kept}{REDACTED}"


# Embedded images: base64 runs far longer than any token, holding no readable text, and most of a
# report's bytes. They are stepped over in one fast scan instead of being searched for secrets.
_ENCODED_DATA = re.compile(r"[A-Za-z0-9+/=]{2048,}")
_USERINFO_ONLY = re.compile(f"{_URL_USERINFO}|{_BARE_USERINFO}")


@lru_cache(maxsize=8)
def _scrub_pattern(values: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern for everything `scrub_text` replaces, so the text is scanned once."""
    # Longest first, so a value that contains another is replaced whole.
    literals = [re.escape(v) for v in sorted(values, key=len, reverse=True)]
    return re.compile("|".join([*literals, _KNOWN_TOKEN.pattern, *_STRUCTURED_SECRETS]))


def scrub_text(text: str, environ: Mapping[str, str] = os.environ) -> str:
    """Last line of defence for finished notebooks, HTML, logs and console lines.

    One compiled pass replaces: the value of every secret-named environment variable (6
    characters or more, so a "1" or "true" does not rewrite the whole text); credential-shaped
    tokens; the value after a secret-named flag, assignment or query parameter; and URL userinfo.
    """
    return _scrub(text, _scrub_pattern(_secret_values(environ)))


def scrub_data(data: object, environ: Mapping[str, str] = os.environ) -> object:
    """`scrub_text` applied to every string inside nested dicts and lists (keys included)."""
    # The environment is read once for the whole tree: a notebook holds a thousand strings.
    return _scrub_nested(data, _scrub_pattern(_secret_values(environ)))


def _secret_values(environ: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(sorted({v for k, v in environ.items() if len(v) >= 6 and is_secret_name(k)}))


def _scrub(text: str, pattern: re.Pattern[str]) -> str:
    pieces, start = [], 0
    for run in _ENCODED_DATA.finditer(text):
        pieces += [pattern.sub(_replace_match, text[start : run.start()]), run.group()]
        start = run.end()
    pieces.append(pattern.sub(_replace_match, text[start:]))
    return "".join(pieces)


# A key of parsed data (a JSON or YAML mapping) that names a secret: its text value is the secret,
# whatever it looks like, as `name: value` is in text.
_SECRET_KEY = re.compile(
    r"(?:[A-Za-z0-9]+[-_.])*(?i:" + _SECRET_WORDS_IN_NAMES + r"|authorization)"
)


def is_secret_key(name: str) -> bool:
    """True when a mapping key (`auth`, `db_password`, `Authorization`) says its value is secret."""
    return bool(_SECRET_KEY.fullmatch(name))


def _scrub_nested(data: object, pattern: re.Pattern[str]) -> object:
    if isinstance(data, str):
        return _scrub(data, pattern)
    if isinstance(data, dict):
        return {
            _scrub(str(k), pattern): REDACTED
            if isinstance(v, str) and v and is_secret_key(str(k))
            else _scrub_nested(v, pattern)
            for k, v in data.items()
        }
    if isinstance(data, (list, tuple)):
        return [_scrub_nested(v, pattern) for v in data]
    return data


_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement, erase
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks, clipboard
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[@-Z\\-_]?"  # any other escape, or a lone ESC
    r"|\x9b[0-?]*[ -/]*[@-~]"  # single-byte CSI
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # other C0/C1 controls; newline and tab stay
    r"|[\u202a-\u202e\u2066-\u2069]"  # bidirectional overrides and isolates
)


def strip_control(text: str) -> str:
    """`text` without terminal control sequences or control characters (newlines and tabs kept)."""
    return _CONTROL.sub("", text)


# What no UTF-8 encoder, XML 1.0 document or tracker accepts: lone surrogates (from bytes decoded
# with surrogateescape, or JSON's "\ud800") and the non-characters U+FFFE and U+FFFF.
_UNENCODABLE = re.compile("[\ud800-\udfff\ufffe\uffff]")


def encodable(text: str) -> str:
    """`text` with every character UTF-8 and XML cannot hold replaced by U+FFFD."""
    return _UNENCODABLE.sub("\ufffd", text)


def tracker_text(text: str) -> str:
    """Text for a tracker, a JUnit file or an event file: control sequences stripped, secrets
    scrubbed, and every character that would make the file invalid replaced."""
    return encodable(scrub_text(strip_control(text)))


def console_line(text: str) -> str:
    """A line for the console or a log that holds text from run files or user code: control
    sequences stripped and secrets scrubbed (a hand-edited or foreign file may carry either)."""
    return encodable(scrub_text(strip_control(text)))
