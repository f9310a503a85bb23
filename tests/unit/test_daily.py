"""The daily as-of tables without Spark: the `daily.timezone` setting, and where a day ends as a TiDB timestamp."""

from __future__ import annotations

import datetime as dt

import pytest

from spark_jobs.backfill.daily import DayStatus, end_of_day, end_of_day_ts
from spark_jobs.config import load_config
from spark_jobs.errors import ConfigError
from spark_jobs.gold import names
from spark_jobs.gold.history import ts_at

CONFIG = """
runtime: {{mode: embedded, local_dir: lake}}
sources:
  - {{name: shop, protocol: canal-json, topics: [shop_cdc], kafka: {{bootstrap_servers: "127.0.0.1:9092"}}}}
{daily}
"""


def config_with(tmp_path, daily: str):
    path = tmp_path / "pipeline.yaml"
    path.write_text(CONFIG.format(daily=daily))
    return load_config(path)


def test_timezone_defaults_to_utc_and_takes_an_iana_name(tmp_path):
    assert config_with(tmp_path, "").daily.timezone == "UTC"
    assert config_with(tmp_path, "daily: {timezone: Asia/Shanghai}").daily.timezone == "Asia/Shanghai"


@pytest.mark.parametrize("zone", ["Mars/Olympus", "utc", "", "../etc/passwd", "/etc/localtime", "Asia"])
def test_an_unknown_timezone_is_a_config_error_naming_the_key(tmp_path, zone):
    with pytest.raises(ConfigError) as error:
        config_with(tmp_path, f"daily: {{timezone: '{zone}'}}")
    assert "daily.timezone" in str(error.value) and "not a known time zone" in str(error.value)
    assert str(tmp_path / "pipeline.yaml") in str(error.value)


def test_an_unknown_daily_key_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"daily.*unknown key 'zone'"):
        config_with(tmp_path, "daily: {zone: UTC}")


def test_a_utc_day_ends_at_the_last_tso_before_midnight():
    day = dt.date(2025, 11, 23)
    midnight_ms = int(dt.datetime(2025, 11, 24, tzinfo=dt.UTC).timestamp() * 1000)
    assert end_of_day(day) == dt.datetime(2025, 11, 23, 23, 59, 59, 999000, tzinfo=dt.UTC)
    assert end_of_day_ts(day) == (midnight_ms << 18) - 1 == ts_at(end_of_day(day))
    # a commit at 23:59:59.999 belongs to the day, one at midnight to the next
    assert ((midnight_ms - 1) << 18) | 7 <= end_of_day_ts(day) < midnight_ms << 18


def test_a_day_in_another_zone_ends_at_its_own_midnight():
    day = dt.date(2025, 11, 23)
    shanghai = dt.datetime(2025, 11, 23, 16, tzinfo=dt.UTC)  # midnight of the 24th at UTC+8
    assert end_of_day(day, "Asia/Shanghai") == shanghai - dt.timedelta(milliseconds=1)
    assert end_of_day_ts(day, "Asia/Shanghai") == (int(shanghai.timestamp() * 1000) << 18) - 1
    new_york = dt.datetime(2025, 11, 24, 5, tzinfo=dt.UTC)  # UTC-5 in November
    assert end_of_day_ts(day, "America/New_York") == (int(new_york.timestamp() * 1000) << 18) - 1


def test_a_day_across_a_daylight_saving_change_is_23_or_25_hours():
    berlin = "Europe/Berlin"
    spring, autumn = dt.date(2025, 3, 30), dt.date(2025, 10, 26)
    assert end_of_day(spring, berlin) - end_of_day(spring - dt.timedelta(days=1), berlin) == dt.timedelta(hours=23)
    assert end_of_day(autumn, berlin) - end_of_day(autumn - dt.timedelta(days=1), berlin) == dt.timedelta(hours=25)


def test_a_day_is_complete_once_the_consistent_ts_reaches_its_end():
    day = dt.date(2025, 11, 23)
    end = end_of_day_ts(day)
    assert DayStatus(day, "UTC", end, end).complete
    assert not DayStatus(day, "UTC", end, end - 1).complete
    assert not DayStatus(day, "UTC", end, None).complete
    assert "not complete yet" in DayStatus(day, "UTC", end, end - 1).line("shop")


def test_daily_tables_live_apart_from_gold():
    assert names.daily_table("shop", "shop", "orders") == ("daily_shop", "shop__orders")
    assert names.daily_table("shop", "Shop", "order items") == ("daily_shop", names.gold_table("Shop", "order items"))
    assert names.daily_table("shop", "shop", "orders")[0] != names.gold_namespace("shop")
