"""The date pattern is the calendar: for every year 0001-9999 it takes February 29 exactly in the
Gregorian leap years (Python's calendar decides), and every other month-day exactly when Python's
datetime has that date; a time's fraction has at least one digit (RFC 3339: "." 1*DIGIT), a
date-time joins them with "T", and an e-mail address's local part is dot-separated atoms (RFC 5322:
no space, no empty atom). Hand-worked cases from the RFCs' grammars."""
from __future__ import annotations

import calendar
import datetime
import re

import pytest

from dllm.samplers.constraints.schema_formats import DATE, FORMAT_PATTERNS, TIME

DATE_RE, TIME_RE = re.compile(DATE), re.compile(TIME)


def test_february_29_exactly_in_leap_years():
    taken = [year for year in range(0, 10000) if DATE_RE.fullmatch(f"{year:04d}-02-29")]
    assert taken == [year for year in range(1, 10000) if calendar.isleap(year)]


def _is_date(year: int, month: int, day: int) -> bool:
    try:
        datetime.date(year, month, day)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("year", [0, 1, 4, 100, 400, 1000, 1900, 2000, 2019, 2024, 9999])
def test_every_month_day_of_a_year_is_taken_exactly_when_it_is_a_date(year):
    for month in range(0, 14):
        for day in range(0, 33):
            text = f"{year:04d}-{month:02d}-{day:02d}"
            assert bool(DATE_RE.fullmatch(text)) == _is_date(year, month, day), text


@pytest.mark.parametrize("text, is_time", [
    ("12:00:00Z", True), ("12:00:00.5Z", True), ("23:59:59.123456+05:30", True),
    ("12:00:00.Z", False), ("12:00:00.+01:00", False), ("12:00:00", False), ("24:00:00Z", False),
    ("12:60:00Z", False), ("12:00:00+24:00", False),
])
def test_times_are_rfc3339_partial_time_and_offset(text, is_time):
    assert bool(TIME_RE.fullmatch(text)) == is_time


@pytest.mark.parametrize("fmt, text, matches", [
    ("date-time", "2020-02-29T12:00:00Z", True), ("date-time", "2020-02-29 12:00:00Z", False),
    ("date-time", "2019-02-29T12:00:00Z", False),
    ("email", "ann.lee@example.com", True), ("email", "ann lee@example.com", False),
    ("email", "ann..lee@example.com", False), ("email", ".ann@example.com", False), ("email", "ann@example", False),
])
def test_date_times_and_emails_follow_their_rfcs(fmt, text, matches):
    assert bool(re.fullmatch(FORMAT_PATTERNS[fmt], text)) == matches
