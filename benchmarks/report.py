"""Medians, ranges and the side-by-side table."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Stat:
    median: float
    lo: float
    hi: float
    n: int

    def as_dict(self) -> dict[str, float]:
        return {"median": self.median, "min": self.lo, "max": self.hi, "n": self.n}


def stat(trials: list[dict[str, Any]], metric: str) -> Stat | None:
    vals = [t[metric] for t in trials if "error" not in t and t.get(metric) is not None]
    if not vals:
        return None
    return Stat(statistics.median(vals), min(vals), max(vals), len(vals))


def paired_ratios(
    mine: list[dict[str, Any]], other: list[dict[str, Any]], metric: str
) -> Stat | None:
    """mine/other within each trial (the two ran minutes apart, under about the same
    load), summarised like any metric: steadier than the ratio of medians on a busy box."""
    ratios = []
    for a, q in zip(mine, other, strict=False):
        av, qv = a.get(metric), q.get(metric)
        if "error" in a or "error" in q or av is None or not qv:
            continue
        ratios.append(av / qv)
    if not ratios:
        return None
    return Stat(statistics.median(ratios), min(ratios), max(ratios), len(ratios))


def fmt_num(v: float, digits: int) -> str:
    if digits == 0:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def fmt_stat(s: Stat | None, digits: int) -> str:
    if s is None:
        return "-"
    if s.n == 1:
        return fmt_num(s.median, digits)
    return f"{fmt_num(s.median, digits)} ({fmt_num(s.lo, digits)}-{fmt_num(s.hi, digits)})"


@dataclass(frozen=True)
class Row:
    label: str
    acta_key: str
    pgq_key: str
    metric: str
    digits: int
    better: str  # "higher" or "lower" is better; "-": no ratio (not a property of a system)


def rows_for(drain_keys: list[tuple[str, str]], only: list[str]) -> list[Row]:
    rows: list[Row] = []
    if "enqueue" in only:
        rows += [
            Row("(a) enqueue, 1 per txn, jobs/s", "enqueue_single", "enqueue_single",
                "jobs_per_s", 0, "higher"),
            Row("(a) enqueue, 1 per txn: a trivial ORM model beside it, rows/s",
                "enqueue_single", "enqueue_single", "orm_jobs_per_s", 0, "-"),
            Row("(a) enqueue, 1 per txn: jobs/s over the trivial model's rows/s",
                "enqueue_single", "enqueue_single", "over_orm", 2, "-"),
            Row("(a) enqueue, bulk 1,000/call, jobs/s", "enqueue_bulk", "enqueue_bulk",
                "jobs_per_s", 0, "higher"),
        ]  # fmt: skip
    if "drain" in only:
        for key, label in drain_keys:
            p = f"(b) drain [{label}]"
            rows += [
                Row(f"{p} jobs/s from spawn", key, "drain", "jobs_per_s", 0, "higher"),
                Row(f"{p} jobs/s first->last", key, "drain", "jobs_per_s_steady", 0, "higher"),
                Row(f"{p} worker CPU s", key, "drain", "worker_cpu_s", 2, "lower"),
                Row(f"{p} worker CPU us/job", key, "drain", "worker_us_per_job", 0, "lower"),
                Row(
                    f"{p} worker CPU us/job after start-up",
                    key,
                    "drain",
                    "worker_us_per_job_steady",
                    0,
                    "lower",
                ),
                Row(f"{p} PG CPU s (all postgres)", key, "drain", "pg_cpu_s", 2, "lower"),
                Row(f"{p} PG CPU us/job (all)", key, "drain", "pg_us_per_job", 0, "lower"),
                Row(f"{p} PG CPU s (bench db+bg)", key, "drain", "pg_cpu_own_s", 2, "lower"),
                Row(f"{p} worker peak RSS MB", key, "drain", "rss_mb", 1, "lower"),
                Row(f"{p} commits / 1,000 jobs", key, "drain", "commits_per_1k", 1, "lower"),
                Row(f"{p} WAL fsyncs / 1,000 jobs", key, "drain", "wal_syncs_per_1k", 1, "lower"),
                Row(f"{p} startup: s to 1st done", key, "drain", "first_completion_s", 2, "lower"),
                Row(f"{p} noise: other CPU s", key, "drain", "other_cpu_s", 2, "-"),
            ]
    if "latency" in only:
        rows += [
            Row("(c) pickup latency p50 ms", "latency", "latency", "p50", 1, "lower"),
            Row("(c) pickup latency p95 ms", "latency", "latency", "p95", 1, "lower"),
            Row("(c) pickup latency p99 ms", "latency", "latency", "p99", 1, "lower"),
        ]
    if "startup" in only:
        rows += [
            Row("(d) start-up: spawn to first claim, ms", "startup", "-", "claim_ms", 0, "lower"),
            Row("(d) start-up: spawn to first completion, ms", "startup", "-", "done_ms", 0,
                "lower"),
        ]  # fmt: skip
    if "features" in only:
        for feature, label in (
            ("plain", "plain (no key)"),
            ("keyed", "keyed (200 keys, limit 5)"),
            ("laned", "laned (200 lanes)"),
            ("fanout", "fan-out (one parent's children)"),
        ):
            p = f"(e) feature drain [64 executors] {label}"
            key = f"feature_{feature}"
            rows += [
                Row(f"{p} jobs/s", key, "-", "jobs_per_s", 0, "higher"),
                Row(f"{p} PG CPU us/job", key, "-", "pg_us_per_job", 0, "lower"),
            ]
        p = "(e) schedule: one tick claimed and completed alone, us"
        rows += [
            Row(f"{p}: a fire (enqueues the next)", "feature_ticks", "-", "fire_us", 0, "lower"),
            Row(f"{p}: a plain job", "feature_ticks", "-", "plain_us", 0, "lower"),
            Row(f"{p}: the fire's own cost", "feature_ticks", "-", "extra_us", 0, "lower"),
        ]
    return rows


def is_acta(system: str) -> bool:
    """``acta`` (this checkout) or ``acta@<rev>`` (a baseline): both keep one drain per
    executor setting (``drain@<setting>``), PgQueuer one drain (``drain``)."""
    return system == "acta" or system.startswith("acta@")


def comparisons(systems: list[str]) -> list[tuple[str, str, str]]:
    """(numerator, denominator, header) of each ratio the table shows: this checkout's acta
    against each other system, PgQueuer as ``acta/PgQ``, a baseline as ``acta/base``."""
    if "acta" not in systems:
        return []
    return [
        ("acta", other, "acta/PgQ" if other == "pgqueuer" else "acta/base")
        for other in systems
        if other != "acta"
    ]


def ratio_field(header: str) -> str:
    """The record's key suffix of a comparison (``ratio``, ``ratio_baseline``)."""
    return "" if header == "acta/PgQ" else "_baseline"


def build_table(
    results: dict[str, dict[str, list[dict[str, Any]]]],
    rows: list[Row],
    labels: dict[str, str],
) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """The table's cells, and the same figures as records for the JSON line: one column
    per system (in the order of ``labels``), then the ratio and per-trial ratio of each
    comparison, then which way is better."""
    systems = [s for s in labels if s in results]
    pairs = comparisons(systems)
    header = ["metric", *(labels[s] for s in systems)]
    for _, _, name in pairs:
        header += [name, "per trial"]
    if pairs:
        header.append("better")
    cells = [header]
    records = []
    for row in rows:

        def trials(system: str, row: Row = row) -> list[dict[str, Any]]:
            key = row.acta_key if is_acta(system) else row.pgq_key
            return results.get(system, {}).get(key, [])

        stats = {s: stat(trials(s), row.metric) for s in systems}
        if all(v is None for v in stats.values()):
            continue
        line = [row.label, *(fmt_stat(stats[s], row.digits) for s in systems)]
        rec: dict[str, Any] = {"metric": row.label, "key": f"{row.acta_key}.{row.metric}"}
        rec.update({s: v.as_dict() if v else None for s, v in stats.items()})
        for mine, other, name in pairs:
            if row.better == "-":
                line += ["", ""]
                continue
            a, q = stats[mine], stats[other]
            ratio = a.median / q.median if a and q and q.median else None
            paired = paired_ratios(trials(mine), trials(other), row.metric)
            line += ["-" if ratio is None else f"{ratio:.2f}x", fmt_stat(paired, 2)]
            rec["ratio" + ratio_field(name)] = ratio
            rec["paired_ratio" + ratio_field(name)] = paired.as_dict() if paired else None
        if pairs:
            line.append("" if row.better == "-" else row.better)
            if row.better != "-":
                rec["better"] = row.better
        cells.append(line)
        records.append(rec)
    return cells, records


def render(cells: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]

    def line(r: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])
