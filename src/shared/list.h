/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Intrusive doubly linked lists, after systemd's list.h (same names, written small). */

#define LIST_FIELDS(t, name) t *name##_next, *name##_prev

#define LIST_PREPEND(name, head, item)                                                                      \
        do {                                                                                                \
                __typeof__(*(head)) **_head = &(head), *_item = (item);                                     \
                if ((_item->name##_next = *_head))                                                          \
                        _item->name##_next->name##_prev = _item;                                            \
                _item->name##_prev = NULL;                                                                  \
                *_head = _item;                                                                             \
        } while (0)

#define LIST_REMOVE(name, head, item)                                                                       \
        do {                                                                                                \
                __typeof__(*(head)) **_head = &(head), *_item = (item);                                     \
                if (_item->name##_next)                                                                     \
                        _item->name##_next->name##_prev = _item->name##_prev;                               \
                if (_item->name##_prev)                                                                     \
                        _item->name##_prev->name##_next = _item->name##_next;                               \
                else if (*_head == _item)                                                                   \
                        *_head = _item->name##_next;                                                        \
                _item->name##_next = _item->name##_prev = NULL;                                             \
        } while (0)

#define LIST_FOREACH(name, i, head) for (__typeof__(*(head)) *i = (head); i; i = i->name##_next)
#define LIST_FOREACH_SAFE(name, i, n, head)                                                                 \
        for (__typeof__(*(head)) *i = (head), *n = i ? i->name##_next : NULL; i;                            \
             i = n, n = i ? i->name##_next : NULL)

/* O(n): for short queues whose order matters (waiters in arrival order). */
#define LIST_APPEND(name, head, item)                                                                       \
        do {                                                                                                \
                __typeof__(*(head)) **_head = &(head), *_item = (item), *_tail = *_head;                    \
                while (_tail && _tail->name##_next)                                                         \
                        _tail = _tail->name##_next;                                                         \
                _item->name##_next = NULL;                                                                  \
                if ((_item->name##_prev = _tail))                                                           \
                        _tail->name##_next = _item;                                                         \
                else                                                                                        \
                        *_head = _item;                                                                     \
        } while (0)
