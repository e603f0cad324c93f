"""`nmt distill`'s report: the teacher and the student on the same test split, for quality, speed and size.

Speed is what a CPU deployment sees: the first SPEED_LINES test lines translated (beam 4, after a warm-up of
WARM_LINES) on one thread and on every thread, fp32 for both models and int8 for the student, and int8 with the
student's lexical shortlist where it has one (inference/shortlist.py; the rows before it decode over the whole
vocabulary). Quality is the whole split, translated on every thread, scored with sacreBLEU against the real references.
"""

from __future__ import annotations

import time
from pathlib import Path

SPEED_LINES = 500
WARM_LINES = 20


def measure(teacher: Path, student: Path, source: Path, reference: Path, device: str) -> dict:
    import torch

    from nmtcli.api import Translator
    from nmtcli.model.checkpoint import SHORTLIST_FILE
    from nmtcli.data.text import read_lines
    from nmtcli.scoring import score

    lines, references = list(read_lines(source)), list(read_lines(reference))
    threads = torch.get_num_threads()
    rows = []
    runs = [("teacher", teacher, "fp32", False), ("student", student, "fp32", False), ("student", student, "int8", False)]
    if (Path(student) / SHORTLIST_FILE).is_file():
        runs.append(("student", student, "int8", True))
    for name, path, precision, shortlist in runs:
        translator = Translator.load(path, device="cpu", precision=precision, shortlist=shortlist)
        translator.translate(lines[:WARM_LINES])
        pace = {}
        for count in sorted({1, threads}):  # one thread, and all of them where there are more
            torch.set_num_threads(count)
            started = time.perf_counter()
            out = translator.translate(lines[:SPEED_LINES])
            seconds = time.perf_counter() - started
            pace[count] = (len(out) / seconds, sum(len(t.text.split()) for t in out) / seconds)
        torch.set_num_threads(threads)
        hyps = [t.text for t in translator.translate(lines)]
        bleu, chrf = score(hyps, references, ["bleu", "chrf"])
        rows.append({"model": name, "path": str(path), "precision": precision, "shortlist": shortlist, "bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2),
                     "lines_per_s_1": round(pace[1][0], 2), "words_per_s_1": round(pace[1][1], 1),
                     "lines_per_s_all": round(pace[threads][0], 2), "words_per_s_all": round(pace[threads][1], 1),
                     "mb": round(sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file()) / 1e6, 2)})
        translator.close()
    teacher_row, student_int8 = rows[0], rows[-1]  # the fastest student: int8, with its shortlist where it has one
    return {"models": rows, "threads": threads, "speed_lines": min(SPEED_LINES, len(lines)), "test_lines": len(lines),
            "bleu_gap": round(teacher_row["bleu"] - rows[1]["bleu"], 2),
            "int8_student_vs_teacher_1_thread": round(student_int8["lines_per_s_1"] / teacher_row["lines_per_s_1"], 2),
            "device_for_speed": "cpu", "device": device}
