"""The reproduction report: per-experiment result files and REPORT.md."""

from jaxlab.report._report import (
    VERDICTS,
    ReportRow,
    read_results,
    render_report,
    save_plot,
    to_jsonable,
    write_results,
)

__all__ = [
    "VERDICTS", "ReportRow", "read_results", "render_report", "save_plot", "to_jsonable",
    "write_results",
]
