/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* "64M", "512K", "1G", "1024": 1024-based, as systemd's parse_size(). 0 or -EINVAL/-ERANGE. */
int parse_size(const char *s, uint64_t *ret);
/* Strict decimal: no sign, no space, no garbage. */
int safe_atou64(const char *s, uint64_t *ret);
/* yes/no/true/false/on/off/1/0 → 1/0, else -EINVAL */
int parse_boolean(const char *s);
