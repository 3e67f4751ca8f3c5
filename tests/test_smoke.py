import agent_core


def test_public_api_is_sorted() -> None:
    assert agent_core.__all__ == sorted(agent_core.__all__)
