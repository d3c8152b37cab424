"""The catalog CLI against a real server (both backends): SQL-style GRANT/REVOKE/SHOW GRANTS,
namespace commands, groups, service principals and `trainyard audit`."""

from __future__ import annotations

import time
import uuid

import requests

from test_cli import cli, parse_table

UC = "/api/2.1/unity-catalog"


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def get_table(server, token: str, full_name: str) -> int:
    r = requests.get(server.api(f"{UC}/tables/{full_name}"),
                     headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return r.status_code


def test_namespace_commands(server, tmp_path):
    cat, sch = name("cat"), name("sch")
    out = cli(server, "catalogs", "create", cat, "--comment", "support data").stdout
    assert f"Created catalog {cat}" in out
    _, rows = parse_table(cli(server, "catalogs", "list").stdout, "NAME")
    mine = [r for r in rows if r["NAME"] == cat]
    assert mine and mine[0]["OWNER"] == "admin" and mine[0]["COMMENT"] == "support data"
    cli(server, "schemas", "create", f"{cat}.{sch}")
    _, rows = parse_table(cli(server, "schemas", "list", cat).stdout, "NAME")
    assert [r["NAME"] for r in rows] == [f"{cat}.{sch}"]
    cli(server, "tables", "create", f"{cat}.{sch}.tickets", "--column", "id:LONG",
        "--column", "text:STRING", "--location", str(tmp_path / "tickets"))
    _, rows = parse_table(cli(server, "tables", "list", f"{cat}.{sch}").stdout, "NAME")
    assert [(r["NAME"], r["TYPE"], r["FORMAT"]) for r in rows] == \
        [(f"{cat}.{sch}.tickets", "EXTERNAL", "DELTA")]
    shown = cli(server, "tables", "get", f"{cat}.{sch}.tickets").stdout
    assert '"type_text":"bigint"' in shown and '"name":"text"' in shown
    # Bad input: clear errors, exit 1.
    bad = cli(server, "tables", "create", f"{cat}.{sch}.t2", "--column", "id:LONGER",
              expect_rc=1)
    assert "NAME:TYPE" in bad.stderr
    bad = cli(server, "schemas", "create", "nodot", expect_rc=1)
    assert "catalog.schema" in bad.stderr
    missing = cli(server, "catalogs", "get", name("missing"), expect_rc=1)
    assert "404" in missing.stderr
    # Deleting a catalog that still holds a schema needs --force.
    cli(server, "catalogs", "delete", cat, expect_rc=1)
    cli(server, "tables", "delete", f"{cat}.{sch}.tickets")
    cli(server, "catalogs", "delete", cat, "--force")
    _, rows = parse_table(cli(server, "catalogs", "list").stdout, "NAME")
    assert cat not in [r["NAME"] for r in rows]


def test_grant_show_revoke_with_groups(server):
    cat, sch = name("cat"), name("sch")
    cli(server, "catalogs", "create", cat)
    cli(server, "schemas", "create", f"{cat}.{sch}")
    cli(server, "tables", "create", f"{cat}.{sch}.tickets", "--column", "id:LONG")
    table = f"{cat}.{sch}.tickets"
    user = name("carol")
    token = server.create_user(user)
    group = name("data-scientists")
    assert f"Created group {group}" in cli(server, "groups", "create", group).stdout
    cli(server, "groups", "add-member", group, user)
    _, rows = parse_table(cli(server, "groups", "list").stdout, "GROUP")
    assert [r["MEMBERS"] for r in rows if r["GROUP"] == group] == [user]

    assert get_table(server, token, table) == 403
    out = cli(server, "grant", "USE", "CATALOG,", "USE", "SCHEMA", "ON", "CATALOG", cat, "TO",
              group).stdout
    assert f"Granted USE CATALOG, USE SCHEMA on CATALOG {cat} to {group}" in out
    cli(server, "grant", "SELECT", "ON", "TABLE", table, "TO", group)
    assert get_table(server, token, table) == 200

    _, rows = parse_table(cli(server, "show", "grants", "ON", "TABLE", table).stdout,
                          "PRINCIPAL")
    got = {(r["PRINCIPAL"], r["PRIVILEGE"], r["TYPE"], r["OBJECT"]) for r in rows}
    assert got == {(group, "SELECT", "TABLE", table),
                   (group, "USE CATALOG", "CATALOG", cat),
                   (group, "USE SCHEMA", "CATALOG", cat)}

    cli(server, "revoke", "SELECT", "ON", "TABLE", table, "FROM", group)
    assert get_table(server, token, table) == 403  # on the next request
    cli(server, "grant", "SELECT", "ON", "TABLE", table, "TO", group)
    cli(server, "groups", "remove-member", group, user)
    assert get_table(server, token, table) == 403

    # Statement errors say what to write instead; nothing reaches the server.
    bad = cli(server, "revoke", "SELECT", "ON", "TABLE", table, "TO", group, expect_rc=1)
    assert "REVOKE takes FROM <principal>" in bad.stderr
    bad = cli(server, "grant", "SELCT", "ON", "TABLE", table, "TO", group, expect_rc=1)
    assert "did you mean SELECT?" in bad.stderr
    bad = cli(server, "grant", "SELECT", "ON", "TABLE", "tickets", "TO", group, expect_rc=1)
    assert "catalog.schema.name" in bad.stderr
    # The server's refusals come through: an unknown principal, a non-owner granting.
    bad = cli(server, "grant", "SELECT", "ON", "TABLE", table, "TO", name("nobody"), expect_rc=1)
    assert "principal" in bad.stderr
    bad = cli(server, "grant", "SELECT", "ON", "TABLE", table, "TO", user, token=token,
              expect_rc=1)
    assert "403" in bad.stderr


def test_service_principals_and_audit(server):
    sp = name("trainer-bot")
    out = cli(server, "service-principals", "create", sp).stdout
    assert f"Created service principal {sp}" in out
    _, rows = parse_table(cli(server, "service-principals", "list").stdout, "SERVICE PRINCIPAL")
    assert sp in [r["SERVICE PRINCIPAL"] for r in rows]

    cat = name("cat")
    cli(server, "catalogs", "create", cat)
    user = name("dave")
    token = server.create_user(user)
    r = requests.get(server.api(f"{UC}/catalogs/{cat}"),
                     headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 403
    cli(server, "grant", "USE", "CATALOG", "ON", "CATALOG", cat, "TO", user)
    r = requests.get(server.api(f"{UC}/catalogs/{cat}"),
                     headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 200

    def events(*args):
        # Decisions are audited asynchronously: poll, bounded by a deadline.
        deadline = time.monotonic() + 20
        while True:
            rows = parse_table(cli(server, "audit", "--user", user, *args).stdout, "TIME")[1]
            if rows or time.monotonic() > deadline:
                return rows
            time.sleep(0.1)

    denies = events("--outcome", "deny")
    assert denies and all(e["OUTCOME"] == "DENY" for e in denies)
    assert any(e["SECURABLE"] == f"catalog {cat}" and e["PRIVILEGE"] == "USE CATALOG"
               for e in denies)
    allows = events("--outcome", "allow", "--securable", f"catalog {cat}")
    assert allows and all(e["OUTCOME"] == "ALLOW" and e["USER"] == user for e in allows)
    bad = cli(server, "audit", "--outcome", "maybe", expect_rc=None)
    assert bad.returncode != 0
    bad = cli(server, "audit", "--securable", cat, expect_rc=1)
    assert "'<type> <full name>'" in bad.stderr
