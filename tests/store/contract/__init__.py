"""The `bot.store.Store` contract, run once per backend (see `conftest.py`)."""
