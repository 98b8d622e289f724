"""Redaction: secrets never reach manifests, notebooks, HTML or logs."""

from __future__ import annotations

import base64
import random
import time

import pytest

from workbench.redact import (
    REDACTED,
    is_secret_name,
    looks_secret_value,
    redact_environment,
    scrub_data,
    scrub_text,
    strip_url_userinfo,
    tracker_text,
)

AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
HF_TOKEN = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3k"
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
GITHUB_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijKLMNOP"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"
# Fixed draws (seeded), so the test cannot flake on an unlucky random token.
_rng = random.Random(1234)
RANDOM_BASE64 = "".join(
    _rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+_")
    for _ in range(40)
)
RANDOM_HEX = "".join(_rng.choice("0123456789abcdef") for _ in range(32))


@pytest.mark.parametrize(
    "name",
    [
        "AWS_SECRET_ACCESS_KEY",
        "HF_TOKEN",
        "github_token",
        "DB_PASSWORD",
        "SMTP_PASSWD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "HTTP_AUTHORIZATION",
        "AWS_SESSION_TOKEN",
        "JUPYTER_COOKIE_SECRET",
        "SSH_PRIVATE_KEY_PATH",
        "NEURON_API_KEY",
        "AZURE_STORAGE_CONNECTION_STRING",
        "NEURON_DB_CONN_STR",
    ],
)
def test_secret_names_are_recognised_in_any_case(name: str) -> None:
    assert is_secret_name(name)
    assert is_secret_name(name.lower())


@pytest.mark.parametrize(
    "name",
    [
        "NEURON_CC_FLAGS",
        "OMP_NUM_THREADS",
        "PATH",
        "XLA_FLAGS",
        "TOKENIZERS_PARALLELISM",
        "NEURON_RT_CONNECTION_TIMEOUT",
    ],
)
def test_ordinary_names_are_not_secret(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    "value",
    [
        AWS_KEY_ID,
        "ASIAY34FZKBOKMUTVV7A",
        f"--cache_dir=s3://bucket --key {AWS_KEY_ID}",
        HF_TOKEN,
        GITHUB_TOKEN,
        GITHUB_PAT,
        JWT,
        f"Bearer {JWT}",
        RANDOM_BASE64,
        RANDOM_HEX,
        f"api={RANDOM_HEX}",
    ],
)
def test_secret_values_are_recognised(value: str) -> None:
    assert looks_secret_value(value)


@pytest.mark.parametrize(
    "value",
    [
        "/usr/local/lib/python3.11/site-packages",
        "/home/ubuntu/aws_neuronx_venv_pytorch_2_9_nxd_training/lib/python3.10/site-packages",
        "/nix/store/0c5k1h4b2jz9qz5j8zq1v8d5x6m4p2n1-python3-3.11.7/lib",
        "2.9.0.2.15.32035",
        "2.13.0+cpu",
        "--model-type=transformer --auto-cast=none --enable-mixed-precision-accumulation",
        "--xla_dump_to=/tmp/xla_dump --xla_dump_hlo_as_text",
        "123e4567-e89b-12d3-a456-426614174000",
        "Linux-6.18.44-fc-v1098-x86_64-with-glibc2.36",
        "0" * 40,
        "true",
    ],
)
def test_paths_versions_and_flags_are_not_secret(value: str) -> None:
    assert not looks_secret_value(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "https://user:s3cr3tpass@example.invalid/simple",
            f"https://{REDACTED}@example.invalid/simple",
        ),
        (
            "git remote: https://x-access-token:abc123@github.com/org/repo.git",
            f"git remote: https://{REDACTED}@github.com/org/repo.git",
        ),
        (
            "a http://u:p@one.invalid b https://v:q@two.invalid/x",
            f"a http://{REDACTED}@one.invalid b https://{REDACTED}@two.invalid/x",
        ),
        # An unescaped "@" inside the password still ends up redacted whole.
        ("https://user:p@ss@host.invalid/", f"https://{REDACTED}@host.invalid/"),
        ("https://pypi.org/simple", "https://pypi.org/simple"),
        ('<a href="https://example.org">mail me@example.org</a>', None),
    ],
)
def test_url_userinfo_is_stripped_and_nothing_else(text: str, expected: str | None) -> None:
    assert strip_url_userinfo(text) == (text if expected is None else expected)


def test_redact_environment_keeps_only_behaviour_variables() -> None:
    environ = {
        "NEURON_CC_FLAGS": f"--auto-cast=none --cache_dir=/cache --tag {AWS_KEY_ID}",
        "NEURON_RT_VISIBLE_CORES": "0-3",
        "XLA_FLAGS": "--xla_dump_to=/tmp/dump",
        "OMP_NUM_THREADS": "8",
        "TOKENIZERS_PARALLELISM": "false",
        "PIP_INDEX_URL": "https://user:s3cr3tpass@example.invalid/simple",
        "TORCH_HUB_TOKEN": "plain-looking-but-named-secret",
        # a kept NEURON_* variable that carries an Azure connection string in its value
        "NEURON_RT_LOG_SINK": "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=Zm9v/K7+b==",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "HF_TOKEN": HF_TOKEN,
        "HOME": "/home/someone",
        "PATH": "/usr/bin",
    }
    kept = redact_environment(environ)
    assert kept == {
        "NEURON_CC_FLAGS": f"--auto-cast=none --cache_dir=/cache --tag {REDACTED}",
        "NEURON_RT_LOG_SINK": f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={REDACTED}",
        "NEURON_RT_VISIBLE_CORES": "0-3",
        "OMP_NUM_THREADS": "8",
        "PIP_INDEX_URL": f"https://{REDACTED}@example.invalid/simple",
        "TOKENIZERS_PARALLELISM": "false",
        "TORCH_HUB_TOKEN": REDACTED,
        "XLA_FLAGS": "--xla_dump_to=/tmp/dump",
    }


def test_scrub_text_replaces_secret_env_values_tokens_and_userinfo() -> None:
    environ = {
        "MY_API_TOKEN": "tok-12345678",
        "MY_API_TOKEN_LONG": "tok-12345678-extended",  # contains the shorter value
        "DB_PASSWORD": "abc",  # too short to scrub without rewriting ordinary text
        "HOME": "/home/someone",  # not secret-named
    }
    text = (
        "token tok-12345678-extended and tok-12345678; pw abc; home /home/someone; "
        f"key {AWS_KEY_ID}; hf {HF_TOKEN}; index https://u:pw@example.invalid/simple"
    )
    assert scrub_text(text, environ) == (
        f"token {REDACTED} and {REDACTED}; pw abc; home /home/someone; "
        f"key {REDACTED}; hf {REDACTED}; index https://{REDACTED}@example.invalid/simple"
    )


def _notebook_text(quarters: int) -> str:
    """About 1.3 MB of code lines with secrets and embedded image data per quarter."""
    rng = random.Random(7)
    image = base64.b64encode(rng.randbytes(750_000 * quarters)).decode()
    return "print('hello') https://u:pw@example.invalid/x s3cr3t-value\n" * 5_000 * quarters + image


def test_scrub_text_is_linear_on_a_multi_megabyte_notebook() -> None:
    """Four times the text costs about four times the CPU time (a pattern that backtracks would
    cost sixteen): a ratio of this process's CPU time in one run, so other processes on the
    machine do not change it."""
    environ = {f"SERVICE_{i}_TOKEN": f"s3cr3t-value-{i:04d}" for i in range(50)}
    environ["MAIN_TOKEN"] = "s3cr3t-value"
    seconds = []
    for quarters in (1, 4):
        text = _notebook_text(quarters)
        started = time.process_time()
        scrubbed = scrub_text(text, environ)
        seconds.append(time.process_time() - started)
        assert "s3cr3t-value" not in scrubbed
        assert "u:pw@" not in scrubbed
        assert text[-1000:] in scrubbed  # embedded image data is left intact
    small, large = seconds
    assert large < 8 * max(small, 0.01), f"{small:.2f} s for 1.3 MB, {large:.2f} s for 5.2 MB"


def test_scrub_data_reaches_nested_strings() -> None:
    environ = {"HF_TOKEN": "hf_notreallyatoken"}
    data = {"outer": [{"cmd": "run --token hf_notreallyatoken"}, 3, None], "n": 1.5}
    assert scrub_data(data, environ) == {
        "outer": [{"cmd": f"run --token {REDACTED}"}, 3, None],
        "n": 1.5,
    }


def test_scrub_data_blanks_values_under_secret_named_keys() -> None:
    data = {"auths": {"r.example": {"auth": "dXNlcjpwYXNz"}}, "db": {"Password": "x y z"}}
    data["tokens"] = "128"
    data["pass_count"] = "3"
    assert scrub_data(data, {}) == {
        "auths": {"r.example": {"auth": REDACTED}},
        "db": {"Password": REDACTED},
        "tokens": "128",
        "pass_count": "3",
    }


# Secret kinds caught by their content, whatever variable or file they sit in: (kind, text, the
# part that must disappear, context that must stay).
SECRETS_BY_CONTENT = [
    ("AWS access key id", f"aws {AWS_KEY_ID} x", AWS_KEY_ID, "aws "),
    (
        "AWS secret in an assignment",
        "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG+bPx",
        "wJalr",
        "aws_secret_access_key=",
    ),
    ("GitHub token", f"git {GITHUB_TOKEN}", GITHUB_TOKEN, "git "),
    ("GitHub fine-grained PAT", GITHUB_PAT, GITHUB_PAT, ""),
    ("Hugging Face token", f"HF {HF_TOKEN}", HF_TOKEN, "HF "),
    ("OpenAI-style sk- key", "key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv", "sk-proj-Ab3dEf6h", "key "),
    ("Stripe-style live key", "sk_live_51Hx9Yz2eZvKYlo2C0aBcDeFgH", "sk_live_51Hx9", ""),
    ("sk-live- value", "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e", "sk-live-4f9a", ""),
    ("Slack bot token", "xoxb-1234567890-0987654321-AbCdEfGhIjKl", "xoxb-1234567890", ""),
    (
        "Slack webhook",
        "https://hooks.slack.com/services/T000/B000/XXXXYYYYZZZZ",
        "T000/B000",
        "https://",
    ),
    ("JWT", f"Bearer {JWT}", JWT[:20], ""),
    (
        "GitLab personal access token",
        "glpat-" + "xY3zA9bC7dE5fG1hJ2kL",
        "xY3zA9bC7dE5",
        "glpat-"[:0],
    ),
    (
        "Google OAuth access token",
        "auth ya29." + "a0AfH6SMBx3kLm9Pq2Rs5Tu8Vw",
        "a0AfH6SMBx3k",
        "auth ",
    ),
    ("Databricks token", "db dapi" + "0123456789abcdef0123456789abcdef", "0123456789abcdef", "db "),
    (
        "Discord webhook",
        "https://discord.com/api/webhooks/123456789012345678/" + "AbCdEfGhIjKlMnOpQrStUvWx-yz_0123",
        "AbCdEfGhIjKlMnOp",
        "https://",
    ),
    (
        "private key block",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow/IBAAK+CAQEA\n-----END RSA PRIVATE KEY-----\nafter",
        "MIIEow",
        "after",
    ),
    (
        "OpenSSH key, truncated",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk/tAAA+Bm9u\n",
        "b3BlbnNz",
        "",
    ),
    ("URL userinfo", "https://bob:hunter2@pypi.example/simple", "hunter2", "pypi.example"),
    ("bare user:password@", "proxy bob:hunter2x@proxy.example:3128", "hunter2x", "proxy.example"),
    ("userinfo inside a path", "/home/bob:pw4x@cache/x", "pw4x", "/home/"),
    (
        "token in a URL query",
        "https://h.example/f?ver=2&access_token=abc123xyz&x=1",
        "abc123xyz",
        "&x=1",
    ),
    (
        "signed URL",
        "https://b.s3.example/o?X-Amz-Signature=9f8e7d6c&X-Amz-Credential=AKIDEX/2026",
        "9f8e7d6c",
        "https://b.s3.example/o?",
    ),
    ("password flag", "--auto-cast=none --password hunter2pw --opt 1", "hunter2pw", "--opt 1"),
    ("password flag with =", "--db-password=hunter2pw --x", "hunter2pw", "--db-password="),
    ("token flag", "--hf-token hunter2tok", "hunter2tok", "--hf-token"),
    ("secret assignment", "PGPASSWORD=hunter2pg psql", "hunter2pg", "psql"),
    ("Google API key", "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "AIzaSyA1b2", ""),
    # name: value and name = value in the syntaxes credentials are kept in
    (
        "~/.aws/credentials line",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG+bPx",
        "wJalr",
        "aws_secret_access_key = ",
    ),
    ("JSON api_key", '{"api_key": "abc123secret"}', "abc123secret", '"api_key": '),
    ("HTML-escaped JSON", "&quot;api_key&quot;: &quot;abc123sec&quot;", "abc123sec", "api_key"),
    ("YAML password", "db:\n  password: hunter2yaml\n  host: h", "hunter2yaml", "host: h"),
    ("shell, quoted", 'PGPASSWORD="hunter2 quoted" psql', "hunter2 quoted", "psql"),
    ("printed Python dict", "{'token': 'tok-abc-123', 'n': 1}", "tok-abc-123", "'n': 1"),
    ("HTTP header", "Authorization: token ghx_abcdef123", "ghx_abcdef123", "Authorization"),
    ("YAML hf_token", "hf_token: hunter2hf", "hunter2hf", "hf_token: "),
    (
        "a pair after a label",
        "credentials: aws_secret_access_key = wJalrLabel",
        "wJalrLabel",
        "aws_secret_access_key = ",
    ),
    ("netrc line", "machine h.example login u password hunter2net", "hunter2net", "h.example"),
    ("docker config", '{"auths": {"r.example": {"auth": "dXNlcjpwYXNz"}}}', "dXNlcjpw", "r.ex"),
    # Each of these families has its must-stay text in test_ordinary_text_is_left_alone.
    (
        "Azure storage connection string",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFy/K7+ab==;"
        "EndpointSuffix=core.windows.net",
        "Zm9vYmFy",
        "AccountName=acct;AccountKey=",
    ),
    (
        "Service Bus connection string",
        "Endpoint=sb://ns.example/;SharedAccessKeyName=Root;SharedAccessKey=q9Z/x+w=;EntityPath=q",
        "q9Z/x+w=",
        "SharedAccessKeyName=Root;",
    ),
    ("az --account-key", "az storage blob list --account-key Zm9vYmFy/K7+ab==", "Zm9v", "az "),
    ("curl -u user:password", "curl -u alice:s3cr3tpw https://h.example", "s3cr3tpw", "alice:"),
    ("curl --user, quoted", "curl --user 'alice:s3cr3tpw' https://h", "s3cr3tpw", "alice:"),
    ("curl --proxy-user=", "curl --proxy-user=bob:pr0xypw https://h", "pr0xypw", "bob:"),
    (
        "npm _authToken",
        "//registry.npmjs.org/:_authToken=npm_Ab3dEf6hIj",
        "npm_Ab3d",
        "npmjs.org/:",
    ),
    ("npm _auth", "_auth=dXNlcjpwYXNzd29yZA==", "dXNlcjpw", "_auth="),
]


@pytest.mark.parametrize(
    ("kind", "text", "secret", "context"),
    SECRETS_BY_CONTENT,
    ids=[s[0] for s in SECRETS_BY_CONTENT],
)
def test_secrets_are_recognised_by_content(kind, text, secret, context):
    scrubbed = scrub_text(text, {})
    assert secret not in scrubbed, kind
    assert REDACTED in scrubbed
    assert context in scrubbed, "what says where the secret was stays readable"


@pytest.mark.parametrize(
    "text",
    [
        "tokenizers==0.21.0",
        "--max-token-length 512 --num-tokens=128",
        "sorted(rows, key=len); max_tokens=512",
        '<a href="mailto:me@example.org">me@example.org</a>',
        "--bypass-cache 1 --passes 3",
        "sk_model_weights_for_the_pipeline",
        "git@github.com:org/repo.git",
        "https://pypi.org/simple?page=2",
        "--auto-cast=none --xla_dump_to=/tmp/dump",
        "at 12:30 on host",
        "tokens: 128, sequence_length: 128",
        "status pass: 3 of 4 tensors; first token: 12 ms; auth: see the wiki",
        "the password is wrong; see the key: it opens",
        "https://example.org/a:b",
        # next to the Azure, curl and npm families above
        "AccountName=acct;SharedAccessKeyName=Root;EndpointSuffix=core.windows.net",
        "docker run -u 1000:1000 img; pip install -U torch==2.13; ps -u root",
        "curl -u alice https://h.example (curl asks for the password)",
        "npm config get registry; _authors: 3",
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert scrub_text(text, {}) == text


def test_scrubbing_is_one_cached_pattern():
    from workbench.redact import _scrub_pattern

    _scrub_pattern.cache_clear()
    environ = {"MY_TOKEN": "tok-12345678"}
    for _ in range(3):
        scrub_text("x --password y", environ)
    assert _scrub_pattern.cache_info().misses == 1


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("\x1b[31mred\x1b[0m", "red"),
        ("a\x1b]0;title\x07b", "ab"),
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("up\x1b[1A\x1b[2Kline", "upline"),
        ("over\rwrite", "overwrite"),
        ("bell\x07 nul\x00 c1\x9b2J", "bell nul c1"),
        ("bidi \u202eevil\u202c", "bidi evil"),
        ("tab\tand\nnewline stay", "tab\tand\nnewline stay"),
    ],
)
def test_control_sequences_are_stripped(raw, clean):
    from workbench.redact import strip_control

    assert strip_control(raw) == clean


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain text, kept", "plain text, kept"),
        ("lone \ud800 surrogate", "lone \ufffd surrogate"),
        ("non-character \ufffe and \uffff", "non-character \ufffd and \ufffd"),
        ("\x1b]0;title\x07bell \x00nul \x1b[31mred", "bell nul red"),
        ("https://u:pw4x@h.example/x", f"https://{REDACTED}@h.example/x"),
    ],
)
def test_tracker_text_is_encodable_xml_safe_and_scrubbed(text: str, expected: str) -> None:
    from xml.etree import ElementTree

    made = tracker_text(text)
    assert made == expected
    made.encode("utf-8")  # no lone surrogate left
    assert ElementTree.fromstring(f"<a>{made}</a>").text == made
