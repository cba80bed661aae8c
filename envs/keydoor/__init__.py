"""KeyDoor: a long-horizon key-and-door env where an early detour (fetching the key) pays only at the end."""
