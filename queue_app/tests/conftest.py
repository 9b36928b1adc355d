import pytest

from testsupport.clients import Api


@pytest.fixture
def api(lane) -> Api:
    """The waiting room's tests run on both lanes: every behaviour holds on each."""
    return Api(lane)
