"""attnd — the Python client of the attnd HTTP microserver (docs/api.md).

    import attnd
    c = attnd.Client("http://127.0.0.1:8080")
    record = c.run(backend="math", seq=2048)

Every refusal of the server raises AttndError carrying its status, code, message and field.
"""
from .client import AttndError, Client, DEFAULT_URL, TERMINAL_STATUSES

__all__ = ["AttndError", "Client", "DEFAULT_URL", "TERMINAL_STATUSES"]
__version__ = "0.1.0"
