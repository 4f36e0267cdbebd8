"""attnd — the Python client of the attnd HTTP microserver (docs/api.md).

    import attnd
    c = attnd.Client("http://127.0.0.1:8080")
    record = c.run(backend="math", seq=2048)

Every refusal of the server raises AttndError carrying its status, code, message and field.
attnd.to_dataframe(records) makes a pandas DataFrame of run records (pandas is optional).
"""
from .client import AttndError, Client, DEFAULT_URL, TERMINAL_STATUSES
from .records import RECORD_COLUMNS, flatten_record, noise_missed, to_dataframe, verify_passed

__all__ = ["AttndError", "Client", "DEFAULT_URL", "TERMINAL_STATUSES", "RECORD_COLUMNS", "flatten_record",
           "noise_missed", "to_dataframe", "verify_passed"]
__version__ = "0.1.0"
