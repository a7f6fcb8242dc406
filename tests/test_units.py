import pytest

from roofline.units import binary, number, parse, si


@pytest.mark.parametrize(
    "text, kind, expected",
    [
        ("3.35 TB/s", "bytes/s", 3.35e12),  # decimal: datasheet bandwidths are powers of 1000
        ("80 GiB", "bytes", 80 * 2**30),  # binary: 85,899,345,920 B
        ("80 GB", "bytes", 80e9),
        ("2 KB", "bytes", 2000),  # the issue: kB and KB are both 1000
        ("2 kB", "bytes", 2000),
        ("1 KiB", "bytes", 1024),
        ("1.5 GiB/s", "bytes/s", 1.5 * 2**30),
        ("989 TFLOP/s", "flop/s", 989e12),
        ("989 TFLOPS", "flop/s", 989e12),
        ("1.98 PFLOP/s", "flop/s", 1.98e15),
        ("200 GFLOPS", "flop/s", 200e9),
        ("7e9", "bytes", 7e9),
        (4096, "bytes", 4096),
        ("50ms", "seconds", 0.05),
        ("2 s", "seconds", 2.0),
        ("250us", "seconds", 250e-6),
    ],
)
def test_parse(text, kind, expected):
    assert parse(text, kind) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    "text, kind",
    [
        ("3 GiB", "flop/s"),
        ("fast", "bytes/s"),
        ("3.35 TB", "bytes/s"),
        ("1 GiFLOP/s", "flop/s"),
        (True, "bytes"),
        ("5 parsecs", "seconds"),
    ],
)
def test_parse_rejects(text, kind):
    with pytest.raises(ValueError, match="expected|unknown"):
        parse(text, kind)


@pytest.mark.parametrize(
    "value, unit, text",
    [
        (3.35e12, "B/s", "3.35 TB/s"),
        (0.0483, "s", "48.3 ms"),
        (1.2e-5, "s", "12.0 µs"),
        (15.0e9, "B", "15.0 GB"),
        (999.96, "B", "1.00 kB"),  # rounding carries into the next prefix
        (131072, "B", "131 kB"),
        # long durations in min, h and days: "1.17 Ms" read as milliseconds (an audit's finding)
        (999.0, "s", "999 s"),
        (1_000.0, "s", "16.7 min"),  # 1000 / 60
        (7_200.0, "s", "2.00 h"),
        (1.17e6, "s", "13.5 days"),  # 1.17e6 / 86,400 = 13.54
        (3598.5, "s", "1.00 h"),  # 59.975 min rounds to 60.0: the next unit
    ],
)
def test_si(value, unit, text):
    assert si(value, unit) == text


def test_tiny_numbers_keep_their_figures():
    # _sig's "#g" writes 2.19e-05 below 1e-4; the fixed form for large numbers must not turn it into "0"
    assert number(2.19e-5) == "2.19e-05" and number(0.000300) == "0.000300" and number(123456.0) == "123456"


def test_binary_only_for_capacities():
    assert binary(80 * 2**30) == "80.0 GiB"
    assert binary(512) == "512 B"


def test_percentile_names_keep_their_decimals():
    # --slo-percentile p99.9 was labelled p100 (rounded to a whole percent).
    from roofline.units import percentile_name

    assert [percentile_name(q) for q in (0.5, 0.99, 0.995, 0.999, 1.0)] == ["p50", "p99", "p99.5", "p99.9", "p100"]
    assert percentile_name(0.99999) == "p99.999"
