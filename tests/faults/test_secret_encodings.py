"""Credentials are scrubbed in their common encodings too: base64 (standard and url-safe, with
and without padding), URL-encoded (quote, quote_plus) and JSON-escaped, in text and in files.
Values too short to scrub safely are refused under `refuse_short_secrets`.

Out of scope, by design: a value inside a larger encoded string, such as the base64 of
`user:secret` in an HTTP Basic header.
"""

from __future__ import annotations

import base64
import json
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from orchestrator import TrialConfig, run_trial
from orchestrator.common.scrub import REDACTED, Scrubber

# Every encoding below gives a different string: "/" and "+" in its base64, a space, a
# quote, a backslash and a non-ASCII letter.
SECRET = 'sk-Ab/c d"e\\f~é?>>>'

ENCODINGS: dict[str, Callable[[str], str]] = {
    "plain": lambda s: s,
    "base64": lambda s: base64.b64encode(s.encode()).decode(),
    "base64-unpadded": lambda s: base64.b64encode(s.encode()).decode().rstrip("="),
    "base64-urlsafe": lambda s: base64.urlsafe_b64encode(s.encode()).decode(),
    "base64-urlsafe-unpadded": lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("="),
    "quote": lambda s: quote(s, safe=""),
    "quote-keeping-slash": quote,
    "quote-lowercase-hex": lambda s: re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), quote(s, "")),
    "quote_plus": quote_plus,
    "json": lambda s: json.dumps(s)[1:-1],
    "json-unicode": lambda s: json.dumps(s, ensure_ascii=False)[1:-1],
    "json-escaped-slash": lambda s: json.dumps(s)[1:-1].replace("/", "\\/"),
}


def test_the_encodings_under_test_all_differ() -> None:
    forms = [encode(SECRET) for encode in ENCODINGS.values()]
    assert len(set(forms)) == len(forms)


@pytest.mark.parametrize("encode", ENCODINGS.values(), ids=ENCODINGS.keys())
def test_text_loses_every_encoding(encode: Callable[[str], str]) -> None:
    scrub = Scrubber([SECRET])
    form = encode(SECRET)

    assert scrub.text(f"key={form}; again {form}.") == f"key={REDACTED}; again {REDACTED}."


@pytest.mark.parametrize("encode", ENCODINGS.values(), ids=ENCODINGS.keys())
def test_files_lose_every_encoding(encode: Callable[[str], str], tmp_path: Path) -> None:
    path = tmp_path / "logs" / "agent" / "out.bin"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00\xff header " + encode(SECRET).encode() + b"\n\xfe tail")

    Scrubber([SECRET]).tree(tmp_path / "logs")

    assert path.read_bytes() == b"\x00\xff header " + REDACTED.encode() + b"\n\xfe tail"


def test_a_result_json_loses_a_secret_with_quotes_and_backslashes() -> None:
    """The result is scrubbed as JSON text, where the value appears escaped."""
    document = json.dumps({"error": f"bad token {SECRET}"})

    assert SECRET not in json.loads(Scrubber([SECRET]).text(document))["error"]
    assert json.loads(Scrubber([SECRET]).text(document)) == {"error": f"bad token {REDACTED}"}


def test_the_padded_form_goes_whole() -> None:
    padded = base64.b64encode(b"sk-live-123").decode()
    assert padded.endswith("=")

    assert Scrubber(["sk-live-123"]).text(f"[{padded}]") == f"[{REDACTED}]"


def test_refuse_short_secrets_names_the_variable_and_not_the_value() -> None:
    with pytest.raises(
        ValueError, match="credential SHORT_KEY: its value has 7 character"
    ) as raised:
        TrialConfig(credentials={"LONG_KEY": "long-enough", "SHORT_KEY": "abc1234"},
                    refuse_short_secrets=True)  # fmt: skip
    assert "abc1234" not in str(raised.value)


def test_short_secrets_are_accepted_by_default_and_skipped_as_before() -> None:
    assert TrialConfig().refuse_short_secrets is False
    config = TrialConfig(credentials={"TINY": "abc", "SHORT": "abcd1"})
    assert TrialConfig(credentials={"OK": "12345678"}, refuse_short_secrets=True)

    assert not Scrubber(["abc"])  # under 4 characters: would redact ordinary words
    assert Scrubber(config.credentials.values()).text("abc abcd1") == f"abc {REDACTED}"


# -- end to end ---------------------------------------------------------------------------------

LEAK_PY = textwrap.dedent(
    """\
    import base64, json, os, urllib.parse

    secret = os.environ["MY_API_KEY"]
    raw = secret.encode()
    forms = {
        "base64": base64.b64encode(raw).decode(),
        "base64_unpadded": base64.b64encode(raw).decode().rstrip("="),
        "base64_urlsafe": base64.urlsafe_b64encode(raw).decode(),
        "quote": urllib.parse.quote(secret, safe=""),
        "quote_plus": urllib.parse.quote_plus(secret),
    }
    with open("/logs/agent/encoded.txt", "w") as out:
        for name, form in forms.items():
            out.write(f"{name}={form}\\n")
    print(json.dumps(forms))
    with open("/tmp/leak", "w") as out:  # the verifier puts it into the result's error
        out.write(forms["base64"] + " " + forms["quote"])
    """
)


async def test_encoded_credentials_never_reach_collected_files_or_the_result(
    make_task, config: TrialConfig
) -> None:
    config = config.model_copy(update={"credentials": {"MY_API_KEY": SECRET}})
    task = make_task(
        "encoded-leak",
        dockerfile="FROM python:3.11-slim-bookworm\nCOPY leak.py /opt/leak.py\n",
        files={"environment/leak.py": LEAK_PY},
        # An unusable reward whose value is the leaked forms: they reach the error message.
        test_sh='#!/bin/sh\nprintf \'{"reward": "%s"}\' "$(cat /tmp/leak)" '
        "> /logs/verifier/reward.json\n",
    )

    result = await run_trial(task, "command:python3 /opt/leak.py", config=config)

    trial_dir = Path(result.trial_dir)
    encoded = (trial_dir / "logs/agent/encoded.txt").read_text().splitlines()
    names = ("base64", "base64_unpadded", "base64_urlsafe", "quote", "quote_plus")
    assert encoded == [f"{name}={REDACTED}" for name in names]
    assert result.agent.exit_code == 0
    assert result.error is not None and result.error.type == "RewardFileError"
    assert f"{REDACTED} {REDACTED}" in result.error.message
    forms = {encode(SECRET) for encode in ENCODINGS.values()}
    collected = [p for p in trial_dir.rglob("*") if p.is_file()]
    assert trial_dir / "result.json" in collected
    assert trial_dir / "logs/agent/stdout.txt" in collected
    for path in collected:
        data = path.read_bytes()
        for form in forms:
            assert form.encode() not in data, f"{path} holds {form!r}"
