/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The /ui page (rule:ui-page): ui.html as the build embeds it (ui-embed.py writes ui-page.c), and the
 * Content-Security-Policy that lets exactly its inline script and style run. */

#include <stddef.h>

extern const char ui_page[]; /* ui_page_size bytes, and a NUL after them */
extern const size_t ui_page_size;
extern const char ui_page_csp[];
