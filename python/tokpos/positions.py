"""Position ids and ALiBi."""

__all__: list[str] = []
