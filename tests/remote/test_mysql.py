"""MySQL/MariaDB sessions over TLS against a throw-away MariaDB (native and ed25519 users)."""

from __future__ import annotations

import pytest

from tests.helpers import Cli
from tests.remote.credentials import add_db, add_tls_ca
from tests.remote.servers import Mariadb


@pytest.fixture(scope="module")
def maria_users(rvault: Cli, mariadb: Mariadb) -> Mariadb:
    mariadb.sql(
        "CREATE DATABASE shop; CREATE TABLE shop.items(id INT PRIMARY KEY, name TEXT);"
        "INSERT INTO shop.items VALUES (1,'apple'),(2,'pear');"
        "CREATE USER native@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('native-pw-1');"
        "CREATE USER edu@'%' IDENTIFIED VIA ed25519 USING PASSWORD('ed-pw-1');"
        "GRANT ALL ON shop.* TO native@'%'; GRANT ALL ON shop.* TO edu@'%';"
    )
    add_tls_ca(rvault, "maria-ca", mariadb.tls.ca)
    rvault.sudo()
    return mariadb


@pytest.mark.parametrize(("user", "password"), [("native", "native-pw-1"), ("edu", "ed-pw-1")])
def test_mysql_session_over_tls(rvault: Cli, maria_users: Mariadb, user: str, password: str) -> None:
    """RM-4/RM-5: TLS with the tls_ca and hostname verification; query runs as an approved ticket."""
    name = f"shop-{user}"
    add_db(rvault, "mysql", maria_users.port, name=name, user=user, database="shop", password=password, tls_ca="maria-ca")
    session = rvault.ok("remote", "open", name)["session"]
    ticket = rvault.ok(
        "remote",
        "propose",
        session,
        "SELECT name, (SELECT variable_value FROM information_schema.session_status "
        "WHERE variable_name = 'Ssl_version') AS tls FROM items ORDER BY id",
    )
    rvault.ok("remote", "approve", ticket["ticket"])
    result = rvault.ok("remote", "exec", ticket["ticket"])["result"]
    assert [r[0] for r in result["rows"]] == ["apple", "pear"]
    assert result["rows"][0][1].startswith("TLSv1.")
    rvault.ok("remote", "close", session)


def test_mysql_wrong_password_and_tls_errors(rvault: Cli, maria_users: Mariadb) -> None:
    """API-8: wrong password → remote_auth_failed; a missing CA → remote_tls_failed."""
    add_db(rvault, "mysql", maria_users.port, name="shop-bad", user="native", password="x", tls_ca="maria-ca")
    assert rvault.err("remote", "open", "shop-bad")["code"] == "remote_auth_failed"
    add_db(rvault, "mysql", maria_users.port, name="shop-noca", user="native", password="native-pw-1")
    assert rvault.err("remote", "open", "shop-noca")["code"] == "remote_tls_failed"
