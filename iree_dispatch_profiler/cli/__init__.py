"""The commands: each module parses its command line, calls the layers below and prints."""
