"""Rebuilds the runs table of docs/reliability.md from the chaos ledger (tests/chaos/ledger.jsonl,
one line per `make chaos` run), between the two marker lines of that file."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEDGER = ROOT / "tests" / "chaos" / "ledger.jsonl"
DOC = ROOT / "docs" / "reliability.md"
BEGIN = "<!-- runs table: built by tests/chaos/report.py from tests/chaos/ledger.jsonl -->"
END = "<!-- end of runs table -->"


def check_count(run: dict, check: str, count: str) -> int:
    """A checker's count; 0 for a run that ended before the checkers (it counts as failed)."""
    return run.get("checks", {}).get(check, {}).get(count, 0)


def _worst(runs: list[dict], figure: str) -> float | None:
    return max((r[figure] for r in runs if r.get(figure) is not None), default=None)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def table(runs: list[dict]) -> str:
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for run in runs:
        groups[run["fault"], run["profile"], run.get("workload", "W1")].append(run)  # W3 came later
    lines = ["| fault | settings | runs | seconds each | faults injected | acknowledged | lost | "
             "duplicates (unexplained) | order violations | commits checked | commits moved back | failed runs | "
             "worst fault -> next ack | worst heal -> drained |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (fault, profile, workload), group in sorted(groups.items(),
                                                    key=lambda item: (int(item[0][0][1:]), *item[0][1:])):
        lost = sum(check_count(r, "C1 lost", "lost") for r in group)
        unexplained = sum(check_count(r, "C4 duplicates", "unexplained") for r in group)
        # Every copy past the first; runs before it was counted give the values stored twice.
        duplicates = sum(check_count(r, "C4 duplicates", "duplicates") or check_count(r, "C4 duplicates", "explained")
                         + check_count(r, "C4 duplicates", "unexplained") for r in group)
        order = sum(check_count(r, "C5 order", "acks out of order") + check_count(r, "C5 order", "stored out of order")
                    for r in group)
        commits = sum(check_count(r, "C6 commits", "acknowledged commits") for r in group)
        moved_back = sum(check_count(r, "C6 commits", "moved back") for r in group)
        durations = sorted({r["duration_s"] for r in group})
        worst = _worst(group, "fault_to_ack_max_s")
        drain = _worst(group, "heal_to_drain_s")
        lines.append(f"| {fault} | {profile}, {workload} | {len(group)} | {'/'.join(f'{d:g}' for d in durations)} | "
                     f"{sum(r.get('faults', 0) for r in group)} | {sum(r.get('acked', 0) for r in group):,} | "
                     f"{lost} | {duplicates} ({unexplained}) | {order} | {commits:,} | {moved_back} | "
                     f"{sum(not r['ok'] for r in group)} | {_seconds(worst)} | {_seconds(drain)} |")
    return "\n".join(lines)


FIFO_CHECK = "C12 FIFO"
FIFO_COUNTS = ("acked sends", "deliveries", "redeliveries", "crashes", "dead letters", "out of order", "lost",
               "never settled", "dead-lettered early")
ACCESS_CHECK = "C15 users and rules"
ACCESS_COUNTS = ("acked create-users", "acked create-acls", "acked update-users", "acked update-acls",
                 "acked delete-acls", "acked delete-users", "unknown", "lost", "came back", "wrong password",
                 "wrong type or status", "wrong rules")


def check_table(runs: list[dict], check: str, counts: tuple[str, ...], workload: str) -> str:
    """One workload's checker, fault by fault: its counts summed over the runs that had it."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for run in runs:
        if check in run.get("checks", {}):
            groups[run["fault"], run["profile"]].append(run)
    lines = ["| fault | settings | runs | " + " | ".join(counts) + " | failed runs |",
             "|---" * (len(counts) + 4) + "|"]
    for (fault, profile), group in sorted(groups.items(), key=lambda item: (int(item[0][0][1:]), item[0][1])):
        sums = " | ".join(f"{sum(check_count(r, check, count) for r in group):,}" for count in counts)
        lines.append(f"| {fault} | {profile}, {workload} | {len(group)} | {sums} | "
                     f"{sum(not r['ok'] for r in group)} |")
    return "\n".join(lines)


TIMER_CHECK, TX_CHECK = "C13 timers", "C14 transactions"
# W7's columns before and after the lateness: (checker, count, heading).
TIMER_COLUMNS = ((TIMER_CHECK, "acked", "timers acked"), (TIMER_CHECK, "lost", "lost"),
                 (TIMER_CHECK, "delivered early", "early"),
                 (TIMER_CHECK, "early under a clock fault", "early (clock fault)"),
                 (TIMER_CHECK, "duplicate copies", "timer duplicates"))
TX_COLUMNS = ((TX_CHECK, "half messages acked", "transactions acked"),
              (TX_CHECK, "committed by the producer", "committed"),
              (TX_CHECK, "rolled back by the producer", "rolled back"),
              (TX_CHECK, "left to the check", "left to the check"),
              (TX_CHECK, "resolved by check", "resolved by check"), (TX_CHECK, "duplicate copies", "tx duplicates"),
              (TX_CHECK, "rolled back but received", "rolled back, received"),
              (TX_CHECK, "committed but never received", "committed, never received"),
              (TX_CHECK, "never resolved", "never resolved"))
LATENESS = ("late p50 ms", "late p99 ms", "late max ms")


def timer_table(runs: list[dict]) -> str:
    """W7's timers (C13) and transactions (C14), fault by fault: counts summed over the runs,
    each lateness figure the worst run's."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for run in runs:
        if TIMER_CHECK in run.get("checks", {}):
            groups[run["fault"], run["profile"]].append(run)

    def sums(group: list[dict], columns: tuple[tuple[str, str, str], ...]) -> str:
        return " | ".join(f"{sum(check_count(r, check, count) for r in group):,}" for check, count, _ in columns)

    headings = [heading for _, _, heading in TIMER_COLUMNS] + ["late p50 / p99 / max"] + [
        heading for _, _, heading in TX_COLUMNS]
    lines = ["| fault | settings | runs | " + " | ".join(headings) + " | failed runs |",
             "|---" * (len(headings) + 4) + "|"]
    for (fault, profile), group in sorted(groups.items(), key=lambda item: (int(item[0][0][1:]), item[0][1])):
        worst = [max((r["checks"][TIMER_CHECK][figure] or 0 for r in group), default=0) for figure in LATENESS]
        lines.append(f"| {fault} | {profile}, W7 | {len(group)} | {sums(group, TIMER_COLUMNS)} | "
                     f"{' / '.join(f'{ms:,}' for ms in worst)} ms | {sums(group, TX_COLUMNS)} | "
                     f"{sum(not r['ok'] for r in group)} |")
    return "\n".join(lines)


def main() -> int:
    runs = [json.loads(line) for line in LEDGER.read_text().splitlines() if line.strip()] if LEDGER.exists() else []
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        print(f"{DOC} has no runs-table markers", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    tables = ""
    if any(FIFO_CHECK in run.get("checks", {}) for run in runs):
        tables = ("\n\nThe FIFO group of the W6 runs (checker C12):\n\n"
                     f"{check_table(runs, FIFO_CHECK, FIFO_COUNTS, 'W6')}")
    if any(TIMER_CHECK in run.get("checks", {}) for run in runs):
        tables += f"\n\nThe timers and transactions of the W7 runs (checkers C13 and C14):\n\n{timer_table(runs)}"
    if any(ACCESS_CHECK in run.get("checks", {}) for run in runs):
        tables += ("\n\nThe users and rules of the W8 runs (checker C15):\n\n"
                      f"{check_table(runs, ACCESS_CHECK, ACCESS_COUNTS, 'W8')}")
    DOC.write_text(f"{head}{BEGIN}\n{table(runs)}{tables}\n{END}{tail}")
    print(f"{DOC}: {len(runs)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
