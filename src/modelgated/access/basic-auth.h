/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* HTTP Basic credentials (RFC 7617) as a browser sends them for /ui and /activity (rule:ui-key): the key is
 * the password, or the user name when the password is empty. Pure. */

#include "shared/macro.h"

/* The key in an Authorization header's value "Basic <base64 of user:password>", into a new string:
 * 1 and *ret_key set; 0: not Basic credentials (another scheme, bad base64, no ':', a NUL or a control
 * character in them, or an empty key); -ENOMEM. */
int basic_auth_key(Span value, char **ret_key);
