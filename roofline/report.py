"""A result that is already plain data (spec views, measure, validate): what it is, its JSON, its CSV rows."""

from typing import Any, NamedTuple


class Report(NamedTuple):
    """`kind` names the table roofline.render draws; `data` is the JSON; `rows` the CSV records (default: data)."""

    kind: str
    data: Any
    rows: list[Any] | None = None

    def to_dict(self) -> Any:
        return self.data

    def csv_rows(self) -> list[Any]:
        if self.rows is not None:
            return self.rows
        return self.data if isinstance(self.data, list) else [self.data]
