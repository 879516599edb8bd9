"""Built-in plugins, written and registered exactly like installed ones.

Each module here is a plugin: :data:`hankweave.plugins.DEFAULT_PLUGINS` lists them, and the
plugin manager registers each under its module name before any installed plugin.  Their
decision hooks are ``trylast``, so an installed plugin can always override them.
"""
