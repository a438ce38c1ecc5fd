"""Getting data in: blocks and their identity (``blocks``), measurement and
corpus files as batches (``batches``), and the inbox new batches arrive in (``inbox``)."""
