"""Hostile documents through `nmt translate -i FILE` and a real `nmt serve`'s /translate_file: time, peak memory, answer.

Each case of issue 50 is built here: a zip bomb (a .docx whose word/document.xml is `<w:p/>` 60 million times: 360 MB
unpacked, ~0.35 MB packed; and one of 18 MB, under the server's 100 MB, so that the server unpacks it too), a broken
deflate stream in word/document.xml, a bad CRC in word/media/image1.png, 5,000 levels of nesting (nested `<w:sdt>` in a
.docx, `<text:section>` in an .odt, `<group>` in an .xliff), the billion laughs and an external entity (XLIFF); and one
file within the CLI's limits that costs the most they allow (2 million XML elements). Each goes through

- the CLI: `python -m nmtcli translate -i FILE -o OUT -m MODEL` as a process of its own: its exit code, the last line
  of its stderr, its wall time and its peak RSS (wait4's ru_maxrss, through a small launcher: `measured`), and whether
  OUT was left behind;
- the server: `nmt serve -m MODEL`, started for each case (--one-server: one for all), the case one upload to
  /translate_file: the HTTP status, the error, the time, the server's peak RSS during the request (VmHWM of
  /proc/PID/status, reset before the upload by writing 5 to /proc/PID/clear_refs), and whether the server then
  translates a normal /translate request. (tests/test_hostile_files.py sends every case to one server in a row.)

A process past --cap-seconds or --cap-mb (polled every 50 ms) is killed, and its row says so ("killed"): a case that
blows up is a row too. The server is started again after such a case. Done (issue 50) means every row within 60 s and
under 1.5 GB (CLI) / 2 GB (server), with the one-line error.

The model is a random tiny one (serve_throughput.build_model: no training; every case fails before translation, and
the "next request" only needs an answer). Run the code before a change by putting its checkout first on the path:
PYTHONPATH=/path/to/old/checkout python benchmarks/hostile_files.py (the processes are `python -m nmtcli`).

Usage: python benchmarks/hostile_files.py [--cases bomb,deflate,...] [--paths cli,serve] [--cap-seconds 60] [--cap-mb 4000]
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path
from typing import BinaryIO

from serve_throughput import build_model, free_port

WORD_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
CONTENT_TYPES = ('<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
                 '<Default Extension="xml" ContentType="application/xml"/><Default Extension="png" ContentType="image/png"/></Types>')
BODY = f'<?xml version="1.0" encoding="UTF-8"?><w:document {WORD_NS}><w:body><w:p><w:r><w:t>the small dog sees a red ball</w:t></w:r></w:p></w:body></w:document>'
ODF_NS = 'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"'
DEPTH = 5_000


def docx(document: str | bytes, image: bytes = b"\x89PNG\r\n\x1a\n" + bytes(range(256))) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", CONTENT_TYPES)
        z.writestr("word/document.xml", document)
        z.writestr(zipfile.ZipInfo("word/media/image1.png"), image, compress_type=zipfile.ZIP_STORED)
    return out.getvalue()


def bomb(path: Path | BinaryIO, paragraphs: int = 60_000_000) -> None:
    """word/document.xml: `<w:p/>` 60 million times (360 MB; ~1,000:1), written a million at a time."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", CONTENT_TYPES)
        with z.open("word/document.xml", "w") as part:
            part.write(f'<?xml version="1.0" encoding="UTF-8"?><w:document {WORD_NS}><w:body>'.encode())
            for done in range(0, paragraphs, 1_000_000):
                part.write(b"<w:p/>" * min(1_000_000, paragraphs - done))
            part.write(b"</w:body></w:document>")


def most_elements() -> bytes:
    """Within `nmt translate`'s limits: word/document.xml of 1,999,000 empty paragraphs with a random attribute each (26 MB,
    ~5 MB packed: 6:1), the most elements a read holds (2,000,000): the CLI reads and writes it (nothing to translate),
    the server refuses it at its limit (1,000,000)."""
    rng = random.Random(0)
    body = (f'<w:document {WORD_NS}><w:body>'.encode() + b"".join(b'<w:p w:a="%02x"/>' % rng.randrange(256) for _ in range(1_999_000))
            + b"</w:body></w:document>")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", CONTENT_TYPES)
        z.writestr("word/document.xml", body)
    return out.getvalue()


def entry_data_offset(package: bytes, name: str) -> int:
    """Where the entry `name`'s packed bytes start: after its local header, name and extra field."""
    info = zipfile.ZipFile(io.BytesIO(package)).getinfo(name)
    at = info.header_offset
    return at + 30 + int.from_bytes(package[at + 26:at + 28], "little") + int.from_bytes(package[at + 28:at + 30], "little")


def broken_deflate() -> bytes:
    """word/document.xml's deflate stream starts with a block of the reserved type 3: zlib's "invalid block type"."""
    package = bytearray(docx(BODY))
    at = entry_data_offset(bytes(package), "word/document.xml")
    package[at:at + 4] = b"\xff\xff\xff\xff"
    return bytes(package)


def bad_crc() -> bytes:
    """word/media/image1.png (stored) with one byte changed: its CRC-32 no longer matches."""
    package = bytearray(docx(BODY))
    at = entry_data_offset(bytes(package), "word/media/image1.png")
    package[at + 20] ^= 0xFF
    return bytes(package)


def deep_docx() -> bytes:
    return docx(f'<w:document {WORD_NS}><w:body>' + "<w:sdt><w:sdtContent>" * DEPTH + "<w:p><w:r><w:t>the dog</w:t></w:r></w:p>"
                + "</w:sdtContent></w:sdt>" * DEPTH + "</w:body></w:document>")


def deep_odt() -> bytes:
    content = (f'<office:document-content {ODF_NS}><office:body><office:text>' + "<text:section>" * DEPTH + "<text:p>the dog</text:p>"
               + "</text:section>" * DEPTH + "</office:text></office:body></office:document-content>")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/vnd.oasis.opendocument.text", compress_type=zipfile.ZIP_STORED)
        z.writestr("content.xml", content)
    return out.getvalue()


def xliff(source: str, doctype: str = "", groups: int = 0) -> bytes:
    return (f'<?xml version="1.0"?>\n{doctype}<xliff version="1.2"><file source-language="en" target-language="de"><body>' + "<group>" * groups
            + f'<trans-unit id="1"><source>{source}</source></trans-unit>' + "</group>" * groups + "</body></file></xliff>\n").encode()


LAUGHS = ("<!DOCTYPE xliff [<!ENTITY lol0 \"lol\">"
          + "".join(f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10}">' for n in range(1, 10)) + "]>\n")
EXTERNAL = '<!DOCTYPE xliff [<!ENTITY secret SYSTEM "file:///etc/passwd">]>\n'

# name -> (file name, how it is built: bytes, or a function writing the path)
CASES = {
    "bomb": ("bomb.docx", bomb),
    # 3 million `<w:p/>` (18 MB): under the server's 100 MB, so the server reads it, and stops it at its ratio
    "bomb-18mb": ("bomb-18mb.docx", lambda path: bomb(path, 3_000_000)),
    "deflate": ("broken-deflate.docx", broken_deflate),
    "crc": ("bad-crc.docx", bad_crc),
    "deep-docx": ("deep.docx", deep_docx),
    "deep-odt": ("deep.odt", deep_odt),
    "deep-xliff": ("deep.xliff", lambda: xliff("the dog", groups=DEPTH)),
    "laughs": ("laughs.xliff", lambda: xliff("&lol9;", LAUGHS)),
    "external": ("external.xliff", lambda: xliff("&secret;", EXTERNAL)),
    "elements": ("elements.docx", most_elements),  # not hostile: the worst a read within the CLI's limits costs
}


def build(name: str, directory: Path) -> Path:
    file_name, make = CASES[name]
    path = directory / file_name
    if not path.exists():
        if name.startswith("bomb"):
            make(path)
        else:
            path.write_bytes(make())
    return path


# --- watching a process ---------------------------------------------------------------------------------------


def status_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


# Starts a command and writes its peak RSS (wait4's ru_maxrss, kB) to argv[1]. Linux keeps a process's high-water mark
# across exec, so a child forked by a big process (this benchmark once it has built a model: torch; pytest) starts at
# the parent's RSS; this launcher is small when it forks, so the number is the command's own.
LAUNCHER = """import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as report:
    report.write(str(usage.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def measured(command: list[str], report: Path, cap_seconds: float = 600, cap_mb: float = 1e9, **popen) -> tuple[int, float, str]:
    """(exit code, peak RSS in MB, "" or how it was killed) of `command`, killed (its process group) past `cap_seconds`
    or `cap_mb` of RSS (polled every 50 ms). A command killed by signal N exits 128 + N."""
    report.unlink(missing_ok=True)
    process = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(report), *command], start_new_session=True, **popen)
    started, killed, polled = time.perf_counter(), "", 0.0
    while process.poll() is None:
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
        try:
            pids = children.read_text().split()
        except OSError:
            pids = []
        rss = sum(status_kb(int(pid), "VmRSS") for pid in pids) / 1024
        polled = max(polled, sum(status_kb(int(pid), "VmHWM") for pid in pids) / 1024)
        if not killed and (time.perf_counter() - started > cap_seconds or rss > cap_mb):
            killed = f"killed at {time.perf_counter() - started:.0f} s, {rss:,.0f} MB"
            os.killpg(process.pid, 9)
        time.sleep(0.05)
    peak = int(report.read_text()) / 1024 if report.exists() else polled
    return process.returncode, peak, killed


def run_cli(path: Path, model: Path, work: Path, cap_seconds: float, cap_mb: float) -> dict:
    out = work / f"out{path.suffix}"
    out.unlink(missing_ok=True)
    err = work / "stderr.txt"
    started = time.perf_counter()
    with open(err, "w") as stderr:
        code, peak, killed = measured([sys.executable, "-m", "nmtcli", "translate", "-i", str(path), "-o", str(out), "-m", str(model),
                                       "--device", "cpu"], work / "peak.txt", cap_seconds, cap_mb,
                                      stdout=subprocess.DEVNULL, stderr=stderr, cwd=work)  # -m puts the cwd first on the path
    seconds = time.perf_counter() - started
    lines = err.read_text(errors="replace").strip().splitlines()
    return {"code": str(code), "error": killed or (lines[-1] if lines else ""), "seconds": seconds, "peak_mb": peak,
            "traceback": any(line.startswith("Traceback") for line in lines),
            "left": code != 0 and (out.exists() or any(p.name.startswith(".out") for p in work.iterdir()))}


class Server:
    def __init__(self, model: Path, work: Path):
        self.port = free_port()
        self.log = open(work / "serve.log", "a")
        self.process = subprocess.Popen([sys.executable, "-m", "nmtcli", "serve", "-m", str(model), "--port", str(self.port),
                                         "--device", "cpu", "--threads", "1", "--max-len-b", "10"],
                                        stdout=self.log, stderr=subprocess.STDOUT, cwd=work)  # not the checkout: PYTHONPATH's nmtcli
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nmt serve exited {self.process.returncode} (see {work / 'serve.log'})")
            try:
                if self.request("GET", "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("nmt serve did not answer within 120 s")

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None, timeout: float = 120):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(method, path, body, headers or {})
            response = connection.getresponse()
            return response.status, response.read().decode("utf-8", "replace")
        finally:
            connection.close()

    def upload(self, path: Path, timeout: float) -> tuple[int, str]:
        boundary = uuid.uuid4().hex
        fields = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in
                          (("source", "en"), ("target", "de")))
        body = (fields + f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\n'
                         f"Content-Type: application/octet-stream\r\n\r\n".encode() + path.read_bytes() + f"\r\n--{boundary}--\r\n".encode())
        return self.request("POST", "/translate_file", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}, timeout)

    def translates(self) -> bool:
        try:
            status, answer = self.request("POST", "/translate", json.dumps({"q": "the small dog", "source": "en", "target": "de"}).encode(),
                                          {"Content-Type": "application/json"}, timeout=60)
        except OSError:
            return False
        return status == 200 and "translatedText" in answer

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


def run_serve(server: Server, path: Path, cap_seconds: float, cap_mb: float) -> dict:
    pid = server.process.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM back to the RSS now: this request's peak from here
    result: dict = {}

    def send() -> None:
        try:
            result["status"], result["answer"] = server.upload(path, timeout=cap_seconds + 30)
        except OSError as e:
            result["status"], result["answer"] = "-", f"{type(e).__name__}: {e}"

    import threading

    started = time.perf_counter()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    killed, peak = "", 0
    while sender.is_alive():
        rss = status_kb(pid, "VmRSS") / 1024
        peak = max(peak, status_kb(pid, "VmHWM") / 1024)
        if time.perf_counter() - started > cap_seconds or rss > cap_mb:
            killed = f"killed at {time.perf_counter() - started:.0f} s, {rss:,.0f} MB"
            server.process.kill()
            break
        time.sleep(0.05)
    sender.join(5)
    seconds = time.perf_counter() - started
    peak = max(peak, status_kb(pid, "VmHWM") / 1024)
    answer = result.get("answer", "")
    try:
        answer = json.loads(answer).get("error", answer)
    except (ValueError, AttributeError):
        pass
    return {"code": str(result.get("status", "-")), "error": killed or answer, "seconds": seconds, "peak_mb": peak,
            "killed": bool(killed), "next": False if killed else server.translates()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    parser.add_argument("--paths", default="cli,serve")
    parser.add_argument("--cap-seconds", type=float, default=60, help="a process running longer is killed (its row says so)")
    parser.add_argument("--cap-mb", type=float, default=4000, help="a process holding more RSS is killed (its row says so)")
    parser.add_argument("--one-server", action="store_true",
                        help="every case to one server (a peak then includes what the cases before left: Python keeps the memory it "
                             "freed); by default each case gets a server of its own, and the next request goes to that server")
    parser.add_argument("--work", type=Path, default=None, help="where the cases and the model go (default: a temporary dir)")
    args = parser.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="nmt-hostile-"))
    work.mkdir(parents=True, exist_ok=True)
    model = work / "model"
    if not (model / "config.json").exists():
        build_model(model)
    import nmtcli

    print(f"nmtcli from {Path(nmtcli.__file__).parent}; cases in {work}", flush=True)
    names = args.cases.split(",")
    paths = {name: build(name, work) for name in names}
    rows = []
    if "cli" in args.paths:
        for name in names:
            r = run_cli(paths[name], model, work, args.cap_seconds, args.cap_mb)
            r.update(case=name, path="cli", next="")
            if r["traceback"]:
                r["error"] = "traceback: " + r["error"]
            if r["left"]:
                r["error"] += " [output left behind]"
            rows.append(r)
            print_row(r)
    if "serve" in args.paths:
        server = Server(model, work)
        for name in names:
            r = run_serve(server, paths[name], args.cap_seconds, args.cap_mb)
            r.update(case=name, path="serve")
            rows.append(r)
            print_row(r)
            if r["killed"] or server.process.poll() is not None or not args.one_server:
                server.stop()
                server = Server(model, work)
        server.stop()
    print()
    print("| case | path | exit / HTTP | error | seconds | peak MB | next request |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        nxt = {"": "", True: "200", False: "failed"}[r["next"]]
        print(f"| {r['case']} | {r['path']} | {r['code']} | {r['error'][:150]} | {r['seconds']:.1f} | {r['peak_mb']:,.0f} | {nxt} |")


def print_row(r: dict) -> None:
    print(f"{r['case']:<12} {r['path']:<6} {r['code']:>4} {r['seconds']:6.1f} s {r['peak_mb']:8,.0f} MB  {r['error'][:160]}", flush=True)


if __name__ == "__main__":
    main()
