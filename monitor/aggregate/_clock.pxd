# cython: language_level=3
"""A trace's time as the compiled admission reads it, in C: the same doubles and window
starts as Python's `datetime.timestamp()` and float floor division (tests/aggregate/
test_admission.py checks them across eras and zones). The module that cimports these
calls `import_datetime()` at import."""

from cpython.datetime cimport (datetime_day, datetime_hour, datetime_microsecond,
                               datetime_minute, datetime_month, datetime_second,
                               datetime_tzinfo, datetime_year, get_utc)
from libc.math cimport copysign, floor, fmod


cdef inline double _seconds(ts) except? -1.0:
    """`ts.timestamp()`, in C for a time in UTC (what the contract's `Z` decodes to): the
    same double (microseconds since the epoch, divided by 10^6 and rounded once, as
    `timedelta.total_seconds` does)."""
    cdef long long y, m, era, yoe, doy, doe, days, micro
    if datetime_tzinfo(ts) is not get_utc():
        return ts.timestamp()
    y, m = datetime_year(ts), datetime_month(ts)
    y -= m <= 2  # days from the civil date (H. Hinnant's algorithm)
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m - 3 if m > 2 else m + 9) + 2) // 5 + datetime_day(ts) - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    days = era * 146097 + doe - 719468
    micro = ((days * 86400 + datetime_hour(ts) * 3600 + datetime_minute(ts) * 60
              + datetime_second(ts)) * 1000000 + datetime_microsecond(ts))
    if micro >= 1LL << 53 or micro <= -(1LL << 53):  # beyond, a double skips integers
        return ts.timestamp()
    return <double>micro / 1e6


cdef inline double _floor_div(double x, double y):
    """`x // y` for floats, as CPython computes it (floatobject.c, `_float_div_mod`)."""
    cdef double mod = fmod(x, y), div, whole
    div = (x - mod) / y
    if mod and (y < 0) != (mod < 0):
        div -= 1.0
    if div:
        whole = floor(div)
        if div - whole > 0.5:
            whole += 1.0
        return whole
    return copysign(0.0, x / y)
