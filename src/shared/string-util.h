/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The leading and trailing whitespace (isspace()) of s cut off, in place: returns the first non-space
 * character, and writes a NUL after the last one. As systemd's strstrip(). */
char *strstrip(char *s);
