"""Fields the system writes for itself are not an API client's: `source: slack` (a case a person
filed with `/refund`) and external ids of the `/refund` job's form (`slack-job-<id>`) are
refused with a 422 naming the field, and nothing is written."""

from __future__ import annotations

import pytest

from refund_desk.runtime import Runtime
from tests.helpers import Harness


@pytest.fixture()
def api(any_runtime: Runtime) -> Harness:
    harness = Harness(any_runtime)
    harness.publish()
    return harness


def test_the_api_refuses_the_source_of_a_persons_slack_filing(api: Harness) -> None:
    before = api.counts()
    answer = api.post(api.request(api.payment("50.00"), "20.00", source="slack"))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert list(error["fields"]) == ["source"] and "'slack'" in error["fields"]["source"]
    assert api.counts() == before


@pytest.mark.parametrize("external_id", ["slack-job-7", "SLACK-JOB-12", "slack-job-"])
def test_the_api_refuses_an_external_id_of_the_filing_jobs_form(
    api: Harness, external_id: str
) -> None:
    before = api.counts()
    answer = api.post(api.request(api.payment("50.00"), "20.00", external_id=external_id))
    assert answer.status_code == 422, answer.text
    assert list(answer.json()["error"]["fields"]) == ["external_id"]
    assert api.counts() == before


def test_the_api_still_takes_its_own_source_and_an_order_number(api: Harness) -> None:
    body = api.request(api.payment("50.00"), "20.00", source="api", external_id="order-slack-1")
    answer = api.post(body)
    assert answer.status_code == 201, answer.text
    assert (answer.json()["source"], answer.json()["external_id"]) == ("api", "order-slack-1")
