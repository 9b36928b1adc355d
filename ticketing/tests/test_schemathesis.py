"""schemathesis against the service as production runs it, with a bounded budget.

The contract tests (test_contract.py) send the requests we thought of; schemathesis
sends the ones we did not: it reads the schema the server publishes at /api/schema/
and generates requests for every operation, valid and invalid (`--max-examples` each,
a fixed `--seed`, so a CI run is bounded and repeatable), against one gunicorn worker
on the test database with an event of the test's own as the default. Each answer must
not be a 5xx (`not_a_server_error`), must have a documented status
(`status_code_conformance`) and content type (`content_type_conformance`), and its body
must match the documented schema (`response_schema_conformance`).
"""

import subprocess
import sys
from pathlib import Path

from testsupport.servers import database_url_of_tests

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"
MAX_EXAMPLES = 25
SEED = 20260101
TIME_LIMIT = 150  # seconds; the run itself takes well under two minutes


def test_schemathesis_finds_no_server_error_and_no_answer_off_the_schema(
    transactional_db, make_event, gunicorn, tmp_path: Path
) -> None:
    # The server books into the test database: it must see the event's row (committed).
    event = make_event(total_seats=1000)
    base, _ = gunicorn(
        {
            "DATABASE_URL": database_url_of_tests(),
            "EVENT_ID": event.event_id,  # what eventId defaults to
            "RATE_LIMIT_JOIN": "0",  # schemathesis is one client sending hundreds a second
            "RATE_LIMIT_LEAVE": "0",
        }
    )
    report = tmp_path / "junit.xml"
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        f"{base}/api/schema/",
        "--url",
        base,
        "--checks",
        CHECKS,
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--generation-database",
        "none",
        "--workers",
        "1",
        "--request-timeout",
        "10",
        "--no-color",
        "--report",
        "junit",
        "--report-junit-path",
        str(report),
    ]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=TIME_LIMIT)
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]
