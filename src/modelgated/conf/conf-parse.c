/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* modelgate.conf(5) read: the text and the drop-ins. The daemon reads a
 * configuration whole at start (and, later, on reload into a fresh Config),
 * never piecemeal. Every error names file, line and key; any error refuses
 * the whole configuration. This is the top of the configuration's files:
 * the Config object itself is in conf.c, what each key means in
 * conf-items.c, the checks across sections in conf-verify.c, and what the
 * configuration names (addresses, key files) is read by conf-resolve.c. */

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/conf/conf-items.h"
#include "modelgated/conf/conf.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/strv.h"

/* One parsed "Key=value" with where it came from. */
typedef struct Assignment {
        const ConfigItem *item;
        char *value;
        unsigned line;
} Assignment;

typedef struct Section {
        SectionKind kind;
        unsigned line;
        Assignment *assignments;
        size_t n_assignments;
} Section;

static void section_done(Section *s) {
        for (size_t i = 0; i < s->n_assignments; i++)
                free(s->assignments[i].value);
        free(s->assignments);
        *s = (Section){.kind = _SECTION_INVALID};
}

static const char *section_last_value(const Section *s, const char *key) {
        const char *v = NULL;
        for (size_t i = 0; i < s->n_assignments; i++)
                if (streq(s->assignments[i].item->key, key))
                        v = s->assignments[i].value;
        return v;
}

static int apply_assignment(Config *c, const char *name, const Assignment *a, void *base) {
        int r = a->item->parse(a->value, (char *)base + a->item->offset);
        if (r == -ENOMEM)
                return log_oom();
        if (r < 0)
                return config_error(
                        c, r == -EDOM || r == -EADDRNOTAVAIL ? EINVAL : r,
                        "%s:%u: [%s] %s='%s' is not valid%s", name, a->line,
                        section_kind_to_string(a->item->section), a->item->key, a->value,
                        r == -EPROTONOSUPPORT ? " (only http:// and https:// URLs are supported)"
                        : r == -EDOM          ? " (letters, digits, '_' and '.', at most 64, as a host name)"
                        : r == -EADDRNOTAVAIL
                                ? " (each an IPv4:port, [IPv6]:port, a port, or an absolute path)"
                                : "");
        return 0;
}

static int section_name(Config *c, const char *name, const Section *s, const char **ret) {
        *ret = section_last_value(s, "Name");
        if (!*ret)
                return config_error(c, EINVAL, "%s:%u: [%s] section without Name=", name, s->line,
                                    section_kind_to_string(s->kind));
        return 0;
}

/* The section_*() find what a section's assignments go to: the one of the same name from an earlier
 * section (a drop-in amends it), else a new one with the defaults. */

static int section_host(Config *c, const char *name, const Section *s, void **ret) {
        const char *hn;
        int r;

        r = section_name(c, name, s, &hn);
        if (r < 0)
                return r;
        for (size_t i = 0; i < c->n_hosts; i++)
                if (streq(c->hosts[i].name, hn))
                        *ret = &c->hosts[i];
        if (*ret)
                return 0;
        HostConf *n = realloc(c->hosts, sizeof(HostConf) * (c->n_hosts + 1));
        if (!n)
                return log_oom();
        c->hosts = n;
        n[c->n_hosts] = (HostConf){
                .idle_stop_usec = CONF_USEC_UNSET,
                .hold_down_usec = CONF_USEC_UNSET,
                .wait_budget_usec = CONF_USEC_UNSET,
                .failed_start_hold_usec = CONF_USEC_UNSET,
                .file = strdup(name),
                .line = s->line,
        };
        *ret = &n[c->n_hosts++];
        return 0;
}

static int section_engine(Config *c, const char *name, const Section *s, void **ret) {
        const char *hn = section_last_value(s, "Host"), *en = section_last_value(s, "Name");

        if (!hn || !en)
                return config_error(c, EINVAL, "%s:%u: [Engine] section without %s=", name, s->line,
                                    hn ? "Name" : "Host");
        for (size_t i = 0; i < c->n_engines; i++)
                if (streq(c->engines[i].host, hn) && streq(c->engines[i].name, en))
                        *ret = &c->engines[i];
        if (*ret)
                return 0;
        EngineConf *n = realloc(c->engines, sizeof(EngineConf) * (c->n_engines + 1));
        if (!n)
                return log_oom();
        c->engines = n;
        n[c->n_engines] = (EngineConf){
                .start_timeout_usec = 5 * USEC_PER_MINUTE,
                .file = strdup(name),
                .line = s->line,
        };
        *ret = &n[c->n_engines++];
        return 0;
}

/* The [Fallback], [Tier] or [Alias] of this section's Name= in its array (each begins with its name): the
 * earlier one of that name (a drop-in amends it), else a new one, a copy of 'initial' with its file and
 * line set. */
static int section_named(Config *c, const char *name, const Section *s, void **array, size_t *n, size_t size,
                         const void *initial, size_t file_offset, size_t line_offset, void **ret) {
        const char *sn;
        int r;

        r = section_name(c, name, s, &sn);
        if (r < 0)
                return r;
        for (size_t i = 0; i < *n; i++) {
                char *e = (char *)*array + i * size;
                if (streq(*(char **)e, sn)) {
                        *ret = e;
                        return 0;
                }
        }
        char *a = reallocarray(*array, *n + 1, size), *e;
        if (!a)
                return log_oom();
        *array = a;
        e = a + (*n)++ * size;
        memcpy(e, initial, size);
        *(char **)(e + file_offset) = strdup(name);
        *(unsigned *)(e + line_offset) = s->line;
        *ret = e;
        return 0;
}

#define SECTION_NAMED(cf, file_name, sec, array, n, type, ret, ...)                                         \
        ({                                                                                                  \
                _Static_assert(offsetof(type, name) == 0, #type " begins with its name");                   \
                section_named(cf, file_name, sec, (void **)&(array), &(n), sizeof(type),                    \
                              &(type){__VA_ARGS__}, offsetof(type, file), offsetof(type, line), ret);       \
        })

static int section_apply(Config *c, const char *name, const Section *s) {
        void *base = NULL;
        int r;

        switch (s->kind) {
        case SECTION_PROXY:
                base = c;
                r = 0;
                break;
        case SECTION_HOST:
                r = section_host(c, name, s, &base);
                break;
        case SECTION_ENGINE:
                r = section_engine(c, name, s, &base);
                break;
        case SECTION_FALLBACK:
                r = SECTION_NAMED(c, name, s, c->fallbacks, c->n_fallbacks, FallbackConf, &base,
                                  .on_busy = -1);
                break;
        case SECTION_ACCESS:
                c->access.enabled = true;
                base = &c->access;
                r = 0;
                break;
        case SECTION_TIER:
                r = SECTION_NAMED(c, name, s, c->tiers, c->n_tiers, TierConf, &base,
                                  .daily_requests = UINT64_MAX, .daily_tokens = UINT64_MAX);
                break;
        case SECTION_ALIAS:
                r = SECTION_NAMED(c, name, s, c->aliases, c->n_aliases, AliasConf, &base,
                                  .policy = ALIAS_POLICY_WARM);
                break;
        default: /* before the first section */
                return 0;
        }
        if (r < 0)
                return r;
        for (size_t i = 0; i < s->n_assignments; i++) {
                r = apply_assignment(c, name, &s->assignments[i], base);
                if (r < 0)
                        return r;
        }
        return 0;
}

static char *strip(char *s) {
        while (isspace((unsigned char)*s))
                s++;
        size_t l = strlen(s);
        while (l > 0 && isspace((unsigned char)s[l - 1]))
                s[--l] = 0;
        return s;
}

/* "[Name]": applies the section before it, and starts this one. */
static int parse_section_header(Config *c, const char *name, unsigned line, char *l, Section *s) {
        size_t n = strlen(l);
        int r;

        if (l[n - 1] != ']' || n < 3)
                return config_error(c, EINVAL, "%s:%u: invalid section header '%s'", name, line, l);
        l[n - 1] = 0;
        l++;
        r = section_apply(c, name, s);
        section_done(s);
        if (r < 0)
                return r;
        s->kind = section_kind_from_string(l);
        if (s->kind < 0)
                return config_error(c, EINVAL, "%s:%u: section [%s] is unknown", name, line, l);
        s->line = line;
        return 0;
}

/* "Key=value": kept with its line until the section is applied, so that an error then points at it. */
static int parse_assignment(Config *c, const char *name, unsigned line, char *l, Section *s) {
        const ConfigItem *item;
        char *eq, *key, *value;
        Assignment *na;

        if (s->kind < 0)
                return config_error(c, EINVAL, "%s:%u: assignment outside of a section", name, line);
        eq = strchr(l, '=');
        if (!eq)
                return config_error(c, EINVAL, "%s:%u: a line that is neither [Section] nor Key=value", name,
                                    line);
        *eq = 0;
        key = strip(l);
        value = eq + 1;
        /* Inline comments, as SPEC.md's examples use them: '#' after whitespace. */
        for (char *h = value; (h = strchr(h, '#')); h++)
                if (h == value || isspace((unsigned char)h[-1])) {
                        *h = 0;
                        break;
                }
        value = strip(value);

        item = config_item_find(s->kind, key);
        if (!item)
                return config_error(c, EINVAL, "%s:%u: unknown key '%s' in section [%s]", name, line, key,
                                    section_kind_to_string(s->kind));
        na = realloc(s->assignments, sizeof(Assignment) * (s->n_assignments + 1));
        if (!na)
                return log_oom();
        s->assignments = na;
        na[s->n_assignments] = (Assignment){.item = item, .value = strdup(value), .line = line};
        if (!na[s->n_assignments].value)
                return log_oom();
        s->n_assignments++;
        return 0;
}

int config_parse_text(Config *c, const char *name, const char *text, size_t size) {
        _cleanup_(section_done) Section s = {.kind = _SECTION_INVALID};
        _cleanup_free_ char *copy = NULL;
        unsigned line = 0;
        int r;

        if (memchr(text, 0, size))
                return config_error(c, EINVAL, "%s: contains a NUL byte", name);
        copy = strndup(text, size);
        if (!copy)
                return log_oom();

        for (char *p = copy, *next; p; p = next) {
                char *l;

                line++;
                next = strchr(p, '\n');
                if (next)
                        *next++ = 0;
                l = strip(p);
                if (*l == 0 || *l == '#' || *l == ';')
                        continue;
                r = *l == '[' ? parse_section_header(c, name, line, l, &s)
                              : parse_assignment(c, name, line, l, &s);
                if (r < 0)
                        return r;
        }
        return section_apply(c, name, &s);
}

static int config_load_one(Config *c, const char *path) {
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        int r;

        r = read_full_file(path, &text, &size);
        if (r < 0)
                return r;
        return config_parse_text(c, path, text ?: "", size);
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int config_load(Config *c, const char *path) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_strv_free_ char **names = NULL;
        bool found = false;
        size_t n = 0;
        DIR *d;
        int r;

        r = config_load_one(c, path);
        if (r == -ENOENT)
                log_debug("%s does not exist, looking for drop-ins only", path);
        else if (r < 0 && r != -EINVAL)
                return config_error(c, r, "Failed to read %s: %m", path);
        else if (r < 0)
                return r;
        else
                found = true;

        if (asprintf(&dir, "%s.d", path) < 0)
                return log_oom();
        d = opendir(dir);
        if (!d) {
                if (errno != ENOENT)
                        return config_error(c, errno, "Failed to open %s: %m", dir);
                goto done;
        }
        for (struct dirent *de; (de = readdir(d));) {
                size_t l = strlen(de->d_name);
                if (de->d_name[0] == '.' || l < 6 || !streq(de->d_name + l - 5, ".conf"))
                        continue;
                char *name = NULL;
                if (asprintf(&name, "%s/%s", dir, de->d_name) < 0 || strv_push(&names, name) < 0) {
                        free(name);
                        closedir(d);
                        return log_oom();
                }
                n++;
        }
        closedir(d);
        if (n > 0)
                qsort(names, n, sizeof(char *), cmp_str);
        for (size_t i = 0; i < n; i++) {
                r = config_load_one(c, names[i]);
                if (r == -EINVAL)
                        return r;
                if (r < 0)
                        return config_error(c, r, "Failed to read %s: %m", names[i]);
                found = true;
        }
done:
        if (!found)
                return config_error(
                        c, ENOENT,
                        "No configuration: neither %s nor %s.d/*.conf exists. See modelgate.conf(5).", path,
                        path);
        return 0;
}

int config_read(Config *c, const char *path) {
        int r;

        r = config_load(c, path);
        if (r < 0)
                return r;
        r = config_verify(c);
        if (r < 0)
                return r;
        return config_resolve(c);
}

char *config_default_path(bool user) {
        const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
        char *p = NULL;

        if (!user)
                return strdup("/etc/modelgate/modelgate.conf");
        if (xdg && xdg[0] == '/')
                return asprintf(&p, "%s/modelgate/modelgate.conf", xdg) < 0 ? NULL : p;
        if (home && home[0] == '/')
                return asprintf(&p, "%s/.config/modelgate/modelgate.conf", home) < 0 ? NULL : p;
        return NULL;
}
