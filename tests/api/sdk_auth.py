"""OpenViking's own Python client (openviking_sdk) against vikingfs serve: keys and accounts.

    sdk_auth.py URL ROOT_KEY USER_KEY USER

USER_KEY is a key `vikingfs key add --user USER` made. Prints one line per check; exits 1 on
the first that fails, naming it.
"""

import os
import sys
import tempfile

# No ovcli.conf or OPENVIKING_* setting of the machine running the tests leaks in.
for k in list(os.environ):
    if k.startswith("OPENVIKING_"):
        del os.environ[k]
os.environ["OPENVIKING_CLI_CONFIG_FILE"] = os.path.join(tempfile.mkdtemp(), "none.conf")

from openviking_sdk import SyncHTTPClient  # noqa: E402
from openviking_sdk._utils import run_async  # noqa: E402
from openviking_sdk.errors import (  # noqa: E402
    AlreadyExistsError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
    UnimplementedError,
)

url, root_key, user_key, user = sys.argv[1:5]


def check(what, cond, detail=""):
    if not cond:
        print(f"FAIL {what} {detail}")
        sys.exit(1)
    print(f"ok {what}")


def client(key, **kw):
    c = SyncHTTPClient(url=url, api_key=key, timeout=30, **kw)
    c.initialize()
    return c


def status(c):
    """GET /api/v1/system/status (no SDK method names it) through the SDK's own request,
    headers and error mapping."""
    a = c._async_client
    return a._handle_response(run_async(a._request("GET", "/api/v1/system/status")))


def health(c):
    """GET /health as the SDK sends it (its health() keeps only a bool)."""
    a = c._async_client
    return run_async(a._request("GET", "/health")).json()


def raises(what, exc, fn):
    try:
        got = fn()
    except exc as e:
        print(f"ok {what} ({type(e).__name__}: {e})")
        return e
    except Exception as e:  # noqa: BLE001
        check(what, False, f"raised {type(e).__name__}: {e}")
    check(what, False, f"answered {got!r}")


root = client(root_key)
check("health", root.health())
me = status(root)
check("root status", me["role"] == "root" and me["user"] == "default", me)
check("root waits", isinstance(root.wait_processed(), dict))
me = status(client(root_key, user="carol"))
check("root acts as another user", me["user"] == "carol" and me["role"] == "root", me)

u = client(user_key)
h = health(u)
check("user key health", (h["user_id"], h["role"], h["account_id"]) == (user, "user", "default"), h)
check("root health", health(root)["role"] == "root")
me = status(u)
check("user key status", me["user"] == user and me["role"] == "user", me)
check("user key waits", isinstance(u.wait_processed(), dict))
raises("user key as another user", PermissionDeniedError,
       lambda: status(client(user_key, user="someone-else")))
raises("user key on the admin API", PermissionDeniedError,
       lambda: u.admin_list_users("default"))

for name, key in [("a wrong key", "vk-00000000000000000000000000000000"), ("no key", None)]:
    bad = client(key)
    check(f"{name}: health", bad.health() is (key is None), "a wrong key is refused, none is not")
    raises(f"{name}: status", UnauthenticatedError, lambda: status(bad))
    raises(f"{name}: wait", UnauthenticatedError, lambda: bad.wait_processed())
    raises(f"{name}: admin", UnauthenticatedError, lambda: bad.admin_list_accounts())

# Accounts: the one this workspace serves.
accounts = root.admin_list_accounts()
check("one account", [a["account_id"] for a in accounts] == ["default"], accounts)
check("the account", root.admin_get_account("default")["status"] == "active")
raises("another account", NotFoundError, lambda: root.admin_get_account("acme"))
raises("create another account", UnimplementedError,
       lambda: root.admin_create_account("acme", "boss"))
raises("create it again", AlreadyExistsError,
       lambda: root.admin_create_account("default", "boss"))

# Users: made, listed, keyed again, promoted and removed through the SDK.
made = root.admin_register_user("default", "dora")
dora_key = made["user_key"]
check("dora's key works", status(client(dora_key))["user"] == "dora")
names = [x["user_id"] for x in root.admin_list_users("default")]
check("users listed", user in names and "dora" in names, names)
check("dora", root.admin_get_user("default", "dora") == {"user_id": "dora", "role": "user"})
raises("dora again", AlreadyExistsError, lambda: root.admin_register_user("default", "dora"))
new_key = root.admin_regenerate_key("default", "dora")["user_key"]
raises("dora's old key", UnauthenticatedError, lambda: status(client(dora_key)))
check("dora's new key", status(client(new_key))["user"] == "dora")
check("dora promoted", root.admin_set_role("default", "dora", "admin")["role"] == "admin")
dora = client(new_key)
check("an admin lists its account's users", len(dora.admin_list_users("default")) >= 2)
raises("an admin lists no accounts", PermissionDeniedError, lambda: dora.admin_list_accounts())
root.admin_remove_user("default", "dora")
raises("dora removed", UnauthenticatedError, lambda: status(client(new_key)))
raises("dora gone", NotFoundError, lambda: root.admin_get_user("default", "dora"))
print("all checks passed")
