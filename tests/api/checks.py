"""The checks the client scripts of tests/api share: each prints `ok: WHAT` or
`FAILED: WHAT: ...` and exits 1 at the first failure, so the Rust test shows what failed."""

import sys


def check(what, cond, got=None):
    if not cond:
        print(f"FAILED: {what}: got {got!r}")
        sys.exit(1)
    print(f"ok: {what}")


def raises(what, exc, f):
    """`f()` must raise `exc`; returns the exception."""
    try:
        r = f()
    except exc as e:
        print(f"ok: {what} ({type(e).__name__}: {e})")
        return e
    except Exception as e:  # noqa: BLE001 - named in the failure
        print(f"FAILED: {what}: raised {type(e).__name__}: {e}")
        sys.exit(1)
    print(f"FAILED: {what}: returned {r!r}")
    sys.exit(1)
