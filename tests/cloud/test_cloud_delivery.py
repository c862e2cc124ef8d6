"""CL-5: a bucket writer without keys cannot silently stop a device's writes from arriving.

Two real engines (A and B, the laptop) sync only through a real S3 wire-protocol server on
loopback (moto's server mode). The attacker is an independent S3 client (boto3) with write
access to the bucket and no device key: it copies an old descriptor over the next slot,
rolls the newest descriptor back (and deletes it) and puts it back, deletes an object, and
writes marks it cannot sign. Each time both devices report the gap with a non-zero exit
(the receiver names the device whose writes are not arriving; the sender learns it from the
receiver's signed marks and uploads again), and once the attacker's object is removed or
replaced every edit arrives, nothing lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from desktop.prober import sanitize
from desktop.status import TrayState, tooltip_text, tray_state
from engine.cloud.objects import device_dir
from tests.cloud.support import S3Server, add_account, bucket_objects
from tests.helpers import Cli
from tests.sync.support import B_PASSWORD, device_id, make_pair, titles

ENV = {"MEMORIES_CLOUD_BACKOFF_MS": "1"}  # back-off due at once: every sync retries


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Cli, Cli]]:
    a, b = make_pair(tmp_path, ENV)
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


_BUCKETS = iter(range(1000))


def _setup(s3: S3Server, pair: tuple[Cli, Cli]) -> tuple[Cli, Cli, str]:
    a, b = pair
    bucket = s3.bucket(f"cl5-{next(_BUCKETS)}-{device_id(a)[:12]}")
    add_account(a, s3.endpoint, bucket)
    add_account(b, s3.endpoint, bucket, password=B_PASSWORD)
    return a, b, bucket


def sync(cli: Cli, expect: int = 0) -> dict[str, Any]:
    proc = cli.run("cloud", "sync", "--json")
    assert proc.returncode == expect, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def slots(s3: S3Server, bucket: str, to: Cli, sender: Cli) -> dict[int, bytes]:
    """The descriptors ``sender`` wrote for ``to``, by sequence number, as the attacker sees them."""
    prefix = f"d/{device_dir(bytes.fromhex(device_id(to)))}/{device_dir(bytes.fromhex(device_id(sender)))}/"
    return {int(k[len(prefix) :]): v for k, v in bucket_objects(s3, bucket).items() if k.startswith(prefix)}


def slot_key(to: Cli, sender: Cli, seq: int) -> str:
    return f"d/{device_dir(bytes.fromhex(device_id(to)))}/{device_dir(bytes.fromhex(device_id(sender)))}/{seq:012d}"


def marks_key(to: Cli, sender: Cli) -> str:
    return f"m/{device_dir(bytes.fromhex(device_id(to)))}/{device_dir(bytes.fromhex(device_id(sender)))}"


def two_bundles(a: Cli, b: Cli) -> None:
    """B's first edit arrives at A; B's second is uploaded (its newest descriptor for A)."""
    b.put("First from B", "first-body")
    sync(b)
    sync(a)
    assert titles(a) == {"First from B"}
    b.put("Second from B", "second-body")
    sync(b)


def assert_not_arriving(result: dict[str, Any], sender: Cli, seq: int, why: str, code: str) -> dict[str, Any]:
    [gap] = result["gaps"]
    assert gap["device_id"] == device_id(sender) and gap["name"] == "laptop"
    assert (gap["seq"], gap["taken"], gap["why"], gap["code"]) == (seq, seq - 1, why, code)
    assert gap["since_ms"] > 0
    return dict(gap)


def assert_attention(cli: Cli, not_arriving: int, not_taken: int) -> None:
    """`memories status` carries it, and the tray and dashboard (fed the same JSON) show it."""
    status = cli.ok("status")
    assert status["cloud_delivery"] == {"not_arriving": not_arriving, "not_taken": not_taken}
    probe = sanitize(status)
    if not_arriving or not_taken:
        assert status["attention"] is True
        assert tray_state(probe) is TrayState.ATTENTION
        tip = tooltip_text(tray_state(probe), probe)
        assert "cloud:" in tip and ("not arriving" in tip or "not taken" in tip), tip
    else:
        assert tray_state(probe) is not TrayState.ATTENTION
        assert "cloud:" not in tooltip_text(tray_state(probe), probe)


def dashboard_shows_it(cli: Cli, tmp_path: Path) -> None:
    """The dashboard (a real `memories dashboard` process, real chromium) shows the attention
    state and the cloud delivery line of the status page."""
    from tests.desktop import browser
    from tests.desktop.support import start_dashboard, stop_process

    dash = start_dashboard(cli, tmp_path / "dashboard.log")
    try:
        assert dash.wait_state("attention")["probe"]["status"]["cloud_delivery"]["not_arriving"] == 1

        async def scenario(page: Any) -> None:
            await page.wait_for_selector("#status-line[data-state='attention']")
            await page.click("#nav-status")
            line = page.locator("#status-cloud_delivery[data-state='attention']")
            await line.wait_for()
            assert "1 device's writes not arriving" in (await line.text_content() or "")

        browser.run_in_browser(dash.url, scenario, height=720, console="csp")
    finally:
        stop_process(dash.proc)


def test_cl5_an_old_descriptor_copied_over_the_next_slot_is_reported_on_both_sides_and_repaired(
    s3: S3Server, pair: tuple[Cli, Cli]
) -> None:
    """CL-5: the attacker copies B's previous descriptor over B's next slot. A reports that B's
    writes are not arriving (exit 1, name and ID, since when, what to do) on every sync, not
    only the first; the status and the tray ask for attention. B learns it from A's marks on
    its own sync (exit 1) and uploads that bundle again; then A takes it and everything after
    it, and both report a clean sync."""
    a, b, bucket = _setup(s3, pair)
    two_bundles(a, b)
    written = slots(s3, bucket, a, b)
    newest = max(written)
    real = written[newest]
    attacker = s3.client()
    attacker.put_object(Bucket=bucket, Key=slot_key(a, b, newest), Body=written[newest - 1])

    first = sync(a, expect=1)
    gap = assert_not_arriving(first, b, newest, "refused", "sync_rejected")
    assert titles(a) == {"First from B"}
    again = sync(a, expect=1)  # looked at again on every later sync, the same gap since the same time
    assert assert_not_arriving(again, b, newest, "refused", "sync_rejected")["since_ms"] == gap["since_ms"]
    text = a.run("cloud", "sync")
    assert text.returncode == 1
    assert "NOT ARRIVING" in text.stdout and "laptop" in text.stdout and device_id(b)[:16] in text.stdout
    assert "memories cloud sync" in text.stdout and "memories sync" in text.stdout
    assert_attention(a, 1, 0)

    # B edits again; its sync reads A's marks: told, and its bundle goes up again.
    b.put("Third from B", "third-body")
    told = sync(b, expect=1)
    [row] = told["not_taken"]
    assert row["device_id"] == device_id(a) and (row["seq"], row["why"]) == (newest, "refused")
    assert row["found_ours"] is False and row["uploaded_again"] is True
    assert told["uploaded_again"] == 1
    assert slots(s3, bucket, a, b)[newest] == real
    b_text = b.run("status")
    assert "cloud:" in b_text.stdout
    assert_attention(b, 0, 1)

    recovered = sync(a)
    assert recovered["gaps"] == [] and len(recovered["merged"]) == 2
    assert titles(a) == {"First from B", "Second from B", "Third from B"}
    assert_attention(a, 0, 0)
    clean = sync(b)
    assert clean["not_taken"] == []
    assert_attention(b, 0, 0)


def test_cl5_a_rolled_back_or_deleted_newest_descriptor_is_taken_once_it_is_put_back(
    s3: S3Server, pair: tuple[Cli, Cli], tmp_path: Path
) -> None:
    """CL-5: the attacker rolls B's newest descriptor back to the previous one: A reports the
    gap; when the real one is put back, A takes it (it is looked at again, not given up). Then
    the attacker deletes B's newest descriptor before A lists it: A still notices from B's
    signed marks (B says it sent it), reports the gap (the dashboard, in a real browser, shows
    the attention item), and takes it once it is back."""
    a, b, bucket = _setup(s3, pair)
    two_bundles(a, b)
    written = slots(s3, bucket, a, b)
    newest = max(written)
    attacker = s3.client()
    attacker.put_object(Bucket=bucket, Key=slot_key(a, b, newest), Body=written[newest - 1])
    assert_not_arriving(sync(a, expect=1), b, newest, "refused", "sync_rejected")
    attacker.put_object(Bucket=bucket, Key=slot_key(a, b, newest), Body=written[newest])
    back = sync(a)
    assert back["gaps"] == [] and titles(a) == {"First from B", "Second from B"}

    b.put("Fourth from B", "fourth-body")
    sync(b)
    written = slots(s3, bucket, a, b)
    newest = max(written)
    attacker.delete_object(Bucket=bucket, Key=slot_key(a, b, newest))
    gone = sync(a, expect=1)
    assert_not_arriving(gone, b, newest, "absent", "cloud_bundle_missing")
    assert titles(a) == {"First from B", "Second from B"}
    assert_attention(a, 1, 0)
    dashboard_shows_it(a, tmp_path)
    attacker.put_object(Bucket=bucket, Key=slot_key(a, b, newest), Body=written[newest])
    assert sync(a)["gaps"] == []
    assert titles(a) == {"First from B", "Second from B", "Fourth from B"}
    assert_attention(a, 0, 0)


def test_cl5_a_deleted_object_is_reported_and_the_sender_uploads_it_again(s3: S3Server, pair: tuple[Cli, Cli]) -> None:
    """CL-5: the attacker deletes the object of B's newest bundle. A reports the gap (exit 1);
    B's next sync learns it from A's marks (exit 1) and uploads the object again under its
    content address; A's next sync takes it."""
    a, b, bucket = _setup(s3, pair)
    b.put("First from B", "first-body")
    sync(b)
    sync(a)
    before = set(bucket_objects(s3, bucket))
    b.put("Second from B", "second-body")
    sync(b)
    stored = bucket_objects(s3, bucket)
    new_objects = sorted(k for k in set(stored) - before if k.startswith("o/"))
    assert new_objects
    attacker = s3.client()
    for key in new_objects:
        attacker.delete_object(Bucket=bucket, Key=key)

    newest = max(slots(s3, bucket, a, b))
    missing = sync(a, expect=1)
    assert_not_arriving(missing, b, newest, "missing", "cloud_object_missing")
    assert titles(a) == {"First from B"}

    told = sync(b, expect=1)
    [row] = told["not_taken"]
    assert (row["seq"], row["why"], row["found_ours"], row["uploaded_again"]) == (newest, "missing", True, True)
    restored = bucket_objects(s3, bucket)
    assert all(restored.get(key) == stored[key] for key in new_objects)

    assert sync(a)["gaps"] == []
    assert titles(a) == {"First from B", "Second from B"}
    assert sync(b)["not_taken"] == []


def test_cl5_a_missing_object_is_looked_for_by_its_address_on_every_sync_even_under_back_off(
    s3: S3Server, tmp_path: Path
) -> None:
    """CL-5 with CL-3's back-off at an hour: the object the attacker deleted is looked for under its
    content address on the very next sync (one not-found request), and when it is back the bundle
    is taken at once, not an hour later; the full retry still waits for its back-off."""
    a, b = make_pair(tmp_path, {"MEMORIES_CLOUD_BACKOFF_MS": str(3600 * 1000)})
    try:
        a, b, bucket = _setup(s3, (a, b))
        before = set(bucket_objects(s3, bucket))
        b.put("From B", "body-b")
        sync(b)
        stored = bucket_objects(s3, bucket)
        [key] = [k for k in set(stored) - before if k.startswith("o/")]
        attacker = s3.client()
        attacker.delete_object(Bucket=bucket, Key=key)
        first = sync(a, expect=1)
        [gap] = first["gaps"]
        assert (gap["why"], gap["attempts"]) == ("missing", 1) and gap["next_ms"] - gap["since_ms"] >= 3_000_000
        still = sync(a, expect=1)  # not due: only the missing object was asked for, not there
        # Two reads: B's marks and the one missing object (the kept descriptor is not read again).
        assert still["gaps"][0]["attempts"] == 1 and still["requests"]["gets"] == 2
        attacker.put_object(Bucket=bucket, Key=key, Body=stored[key])
        taken = sync(a)
        assert taken["gaps"] == [] and titles(a) == {"From B"}
    finally:
        a.stop()
        b.stop()


def test_cl5_marks_the_attacker_writes_are_a_typed_refusal_never_a_crash(s3: S3Server, pair: tuple[Cli, Cli]) -> None:
    """CL-5: marks are signed by their device and name their path's devices. Junk, an oversized
    object, or another device's genuine marks moved under A's path are refused with a typed
    error on B's sync (exit 1, nothing used, nothing else disturbed); A's next sync writes its
    marks again and B's sync is clean."""
    a, b, bucket = _setup(s3, pair)
    b.put("From B", "body-b")
    sync(b)
    sync(a)
    attacker = s3.client()
    key = marks_key(b, a)
    genuine_b_marks = bucket_objects(s3, bucket).get(marks_key(a, b))
    for junk in (
        b"not marks at all",
        b"MEMCLDM\x01" + b"\x93" * 40,
        b"MEMCLDM\x01" + b"x" * 20000,
        genuine_b_marks,  # B's own marks for A: signed, but by the other device for the other path
    ):
        if junk is None:
            continue
        attacker.put_object(Bucket=bucket, Key=key, Body=junk)
        refused = sync(b, expect=1)
        [row] = refused["marks_refused"]
        assert row["device_id"] == device_id(a) and row["code"] in ("sync_rejected", "sync_invalid"), row
        assert refused["gaps"] == [] and refused["not_taken"] == []
    a.put("From A", "body-a")
    sync(a)
    clean = sync(b)
    assert clean["marks_refused"] == [] and titles(b) == {"From A", "From B"}


def test_cl5_marks_parser_refuses_every_damaged_or_misplaced_marks_with_a_typed_error() -> None:
    """CL-5: what the bucket holds is untrusted. Genuine marks read back exactly; every byte
    flipped, every truncation, marks for another path, a forged signature, and fields of the
    wrong type or range are `sync_rejected` (a MemoriesError), never another exception."""
    from nacl.signing import SigningKey

    from engine.cloud import objects as ob
    from engine.crypto.canonical import canonical_bytes, domain_bytes
    from engine.crypto.keys import sign
    from engine.errors import MemoriesError

    sender, receiver, other = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
    to = bytes(receiver.verify_key)
    me = bytes(sender.verify_key)
    stuck = ob.Stuck(4, "refused", "sync_rejected", b"\x07" * 32, 1_700_000_000_000)
    marks = ob.Marks(me, to, 1_700_000_000_123, 3, 9, stuck)
    data = ob.make_marks(sender, marks)
    assert ob.parse_marks(data, sender=me, to=to) == marks

    def refused(blob: bytes, *, sender_pub: bytes = me, to_pub: bytes = to) -> None:
        with pytest.raises(MemoriesError) as info:
            ob.parse_marks(blob, sender=sender_pub, to=to_pub)
        assert info.value.code == "sync_rejected"

    for i in range(len(data)):
        refused(data[:i] + bytes([data[i] ^ 0x41]) + data[i + 1 :])
    for n in range(len(data)):
        refused(data[:n])
    refused(data + b"\x00" * (ob.MAX_MARKS_BYTES + 1))
    refused(data, sender_pub=bytes(other.verify_key))  # another device's path
    refused(data, to_pub=bytes(other.verify_key))  # marks for another receiver
    refused(ob.make_marks(other, ob.Marks(bytes(other.verify_key), to, 1, 3, 9, stuck)))  # signed by another

    import msgspec

    def signed(body: dict[str, Any]) -> bytes:
        raw = canonical_bytes(body)
        return b"MEMCLDM\x01" + msgspec.msgpack.encode(
            {"body": raw, "sig": sign(sender, domain_bytes("memories.cloud-marks", 1, raw))}
        )

    good = {"v": 1, "from": me, "to": to, "at": 5, "taken": 3, "sent": 9, "stuck": stuck.to_wire()}
    assert ob.parse_marks(signed(good), sender=me, to=to).taken == 3
    for change in (
        {"v": 2},
        {"taken": -1},
        {"taken": True},
        {"sent": "9"},
        {"at": -5},
        {"extra": 1},
        {"stuck": {**stuck.to_wire(), "seq": 7}},  # stuck is always just after what was taken
        {"stuck": {**stuck.to_wire(), "why": "bored"}},
        {"stuck": {**stuck.to_wire(), "code": "Not A Code\n"}},
        {"stuck": {**stuck.to_wire(), "hash": b"short"}},
        {"stuck": {**stuck.to_wire(), "since": "yesterday"}},
        {"stuck": [1, 2]},
    ):
        refused(signed({**good, **change}))
    assert ob.parse_marks(signed({**good, "stuck": None}), sender=me, to=to).stuck is None
