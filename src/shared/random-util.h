/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

/* n bytes that differ from process to process and from machine to machine, for names and ids that must
 * not collide (not secrets): getrandom() without blocking, or, before the kernel's pool is ready, the
 * clock and the pid mixed into the first bytes. One system call. */
void random_seed(void *p, size_t n);
