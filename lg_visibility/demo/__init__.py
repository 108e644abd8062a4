"""The demo behind `lg-visibility demo` and `lg-visibility serve`: graphs, app, CLI, UI.

Nothing in the library imports the demo; it depends on the core and on `lg_visibility.chat`.
"""
