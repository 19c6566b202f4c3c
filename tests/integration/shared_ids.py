"""The MESSAGE_IDs of src/shared/message-id.h, read from it (the tests and the daemon share one source)."""

import os
import re

_text = open(os.path.join(os.path.dirname(__file__), "../../src/shared/message-id.h")).read()
MESSAGE_ID_ACCESS = re.search(r'#define MESSAGE_ID_ACCESS "([0-9a-f]{32})"', _text).group(1)
MESSAGE_ID_SWITCH = re.search(r'#define MESSAGE_ID_SWITCH "([0-9a-f]{32})"', _text).group(1)
