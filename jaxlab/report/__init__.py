"""The reproduction report: per-experiment result files, verdicts and REPORT.md."""

from jaxlab.report import verdict
from jaxlab.report._report import (
    LEGEND,
    VERDICTS,
    ReportRow,
    read_results,
    render_report,
    save_plot,
    seed_summary,
    to_jsonable,
    write_results,
)
from jaxlab.report.verdict import (
    Criterion,
    CriterionResult,
    Fact,
    Interpretation,
    criteria_from_config,
    interpretation,
    judge,
    judge_all,
    row_verdict,
)

__all__ = [
    "LEGEND", "VERDICTS", "Criterion", "CriterionResult", "Fact", "Interpretation", "ReportRow",
    "criteria_from_config", "interpretation", "judge", "judge_all", "read_results",
    "render_report", "row_verdict",
    "save_plot", "seed_summary", "to_jsonable", "verdict", "write_results",
]
