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
#include "shared/string-util.h"
#include "shared/strv.h"

/* One parsed "Key=value" with where it came from. */
typedef struct Assignment {
        const ConfigItem *item;
        char *value;
        unsigned line;
        bool bad; /* not valid, said when read: not applied */
} Assignment;

typedef struct Section {
        SectionKind kind;
        bool unknown; /* a header that could not be read: its lines are not looked into (its error says it)
                       */
        unsigned line;
        Assignment *assignments;
        size_t n_assignments;
        /* each value is parsed into an entry of this thrown-away Config as its line is read, so that its
         * error comes in the order of the lines, before the section is applied */
        Config check;
        void *check_base;
} Section;

static void section_done(Section *s) {
        for (size_t i = 0; i < s->n_assignments; i++)
                free(s->assignments[i].value);
        free(s->assignments);
        config_done(&s->check);
        *s = (Section){.kind = _SECTION_INVALID};
}

static int apply_assignment(const Assignment *a, void *base) {
        char why[CONFIG_WHY_MAX];
        int r = a->item->parse(a->value, (char *)base + a->item->offset, why);
        /* it parsed when read (parse_assignment()), and a parser's answer depends on the value only */
        return r == -ENOMEM ? log_oom() : r;
}

/* The last key= of the section (a name it is found by): an error when there is none; NULL in *ret when it
 * is not valid (its error is said). */
static int section_key(Config *c, const char *name, const Section *s, const char *key, const char **ret) {
        *ret = NULL;
        for (size_t i = s->n_assignments; i > 0; i--) {
                const Assignment *a = &s->assignments[i - 1];
                if (!streq(a->item->key, key))
                        continue;
                if (!a->bad)
                        *ret = a->value;
                return 0;
        }
        return config_error(c, EINVAL, "%s:%u: [%s] section without %s=", name, s->line,
                            section_kind_to_string(s->kind), key);
}

static int section_name(Config *c, const char *name, const Section *s, const char **ret) {
        return section_key(c, name, s, "Name", ret);
}

/* The section_*() find what a section's assignments go to: the one of the same name from an earlier
 * section (a drop-in amends it), else a new one with the defaults. */

static int section_host(Config *c, const char *name, const Section *s, void **ret) {
        const char *hn;
        int r;

        r = section_name(c, name, s, &hn);
        if (r < 0 || !hn)
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
        const char *hn, *en;
        int r, k;

        r = section_key(c, name, s, "Host", &hn);
        k = section_key(c, name, s, "Name", &en);
        if (r < 0 || k < 0)
                return r < 0 ? r : k;
        if (!hn || !en)
                return 0;
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
                .idle_stop_usec = CONF_USEC_UNSET,
                .prompt_cache_save_usec = 5 * USEC_PER_SEC,
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
        if (r < 0 || !sn)
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

/* Finds what the section's assignments go to (the Config, or the entry of its name); NULL in *ret for a
 * section whose name is missing or not valid. */
static int section_target(Config *c, const char *name, const Section *s, void **ret) {
        *ret = NULL;
        switch (s->kind) {
        case SECTION_PROXY:
                *ret = c;
                return 0;
        case SECTION_HOST:
                return section_host(c, name, s, ret);
        case SECTION_ENGINE:
                return section_engine(c, name, s, ret);
        case SECTION_FALLBACK:
                return SECTION_NAMED(c, name, s, c->fallbacks, c->n_fallbacks, FallbackConf, ret,
                                     .on_busy = -1);
        case SECTION_ACCESS:
                c->access.enabled = true;
                *ret = &c->access;
                return 0;
        case SECTION_TIER:
                return SECTION_NAMED(c, name, s, c->tiers, c->n_tiers, TierConf, ret,
                                     .daily_requests = UINT64_MAX, .daily_tokens = UINT64_MAX);
        case SECTION_ALIAS:
                return SECTION_NAMED(c, name, s, c->aliases, c->n_aliases, AliasConf, ret,
                                     .policy = ALIAS_POLICY_WARM);
        default:
                return 0;
        }
}

/* The entry of a thrown-away Config that a section's values are checked in, as they are read */
static void *check_target(Config *check, SectionKind k) {
        void **array;
        size_t size, *n;

        switch (k) {
        case SECTION_HOST:
                array = (void **)&check->hosts, size = sizeof(HostConf), n = &check->n_hosts;
                break;
        case SECTION_ENGINE:
                array = (void **)&check->engines, size = sizeof(EngineConf), n = &check->n_engines;
                break;
        case SECTION_FALLBACK:
                array = (void **)&check->fallbacks, size = sizeof(FallbackConf), n = &check->n_fallbacks;
                break;
        case SECTION_TIER:
                array = (void **)&check->tiers, size = sizeof(TierConf), n = &check->n_tiers;
                break;
        case SECTION_ALIAS:
                array = (void **)&check->aliases, size = sizeof(AliasConf), n = &check->n_aliases;
                break;
        case SECTION_ACCESS:
                return &check->access;
        default:
                return check;
        }
        if (!(*array = calloc(1, size)))
                return NULL;
        *n = 1;
        return *array;
}

/* An entry with a value that is not valid: config_verify() does not say again what is missing from it */
static void section_mark_invalid(SectionKind k, void *base) {
        switch (k) {
        case SECTION_HOST:
                ((HostConf *)base)->invalid = true;
                break;
        case SECTION_ENGINE:
                ((EngineConf *)base)->invalid = true;
                break;
        case SECTION_FALLBACK:
                ((FallbackConf *)base)->invalid = true;
                break;
        case SECTION_TIER:
                ((TierConf *)base)->invalid = true;
                break;
        case SECTION_ALIAS:
                ((AliasConf *)base)->invalid = true;
                break;
        default:
                break;
        }
}

static int section_apply(Config *c, const char *name, const Section *s) {
        void *base = NULL;
        bool invalid = false;
        int r;

        if (s->unknown || s->kind < 0) /* said already, or before the first section */
                return 0;
        r = section_target(c, name, s, &base);
        if (r < 0 || !base) /* a section that names nothing: its values were checked as they were read */
                return r;
        for (size_t i = 0; i < s->n_assignments; i++) {
                if (s->assignments[i].bad) {
                        invalid = true;
                        continue;
                }
                r = apply_assignment(&s->assignments[i], base);
                if (r >= 0 && (s->kind == SECTION_PROXY || s->kind == SECTION_ACCESS))
                        r = config_note_origin(c, s->assignments[i].item->key, name, s->assignments[i].line);
                if (r < 0)
                        return r == -ENOMEM ? log_oom() : r;
        }
        if (invalid)
                section_mark_invalid(s->kind, base);
        return 0;
}

/* "[Name]": applies the section before it, and starts this one. */
static int parse_section_header(Config *c, const char *name, unsigned line, char *l, Section *s) {
        size_t n = strlen(l);
        int r, k = 0;

        r = section_apply(c, name, s);
        section_done(s);
        if (r == -ENOMEM)
                return r;
        s->line = line;
        if (l[n - 1] != ']' || n < 3) {
                s->unknown = true;
                k = config_error(c, EINVAL,
                                 "%s:%u: invalid section header '%s': a header is [Name], alone on its line",
                                 name, line, l);
                return r < 0 ? r : k;
        }
        l[n - 1] = 0;
        l++;
        s->kind = section_kind_from_string(l);
        if (s->kind >= 0) {
                config_init(&s->check);
                if (!(s->check_base = check_target(&s->check, s->kind)))
                        return log_oom();
        } else {
                const char *close = section_kind_closest(l);
                s->unknown = true;
                k = config_error(c, EINVAL, "%s:%u: section [%s] is unknown; %s%s%s", name, line, l,
                                 close ? "did you mean [" : "the sections are ",
                                 close ?: section_kind_list(), close ? "]?" : "");
        }
        return r < 0 ? r : k;
}

/* "Key=value": kept with its line until the section is applied, so that an error then points at it. */
static int parse_assignment(Config *c, const char *name, unsigned line, char *l, Section *s) {
        const ConfigItem *item;
        char *eq, *key, *value;
        Assignment *na;

        eq = strchr(l, '=');
        if (!eq)
                return config_error(c, EINVAL, "%s:%u: a line that is neither [Section] nor Key=value", name,
                                    line);
        if (s->unknown)
                return 0;
        *eq = 0;
        key = strstrip(l);
        value = eq + 1;
        /* Inline comments, as modelgate.conf(5) allows them: '#' after whitespace. */
        for (char *h = value; (h = strchr(h, '#')); h++)
                if (h == value || isspace((unsigned char)h[-1])) {
                        *h = 0;
                        break;
                }
        value = strstrip(value);

        if (s->kind < 0) {
                SectionKind k = config_item_section_of(_SECTION_INVALID, key);
                return config_error(c, EINVAL, "%s:%u: assignment outside of a section; %s%s%s", name, line,
                                    k >= 0 ? "it goes under [" : "a file begins with a [Section] header",
                                    k >= 0 ? section_kind_to_string(k) : "", k >= 0 ? "]" : "");
        }
        item = config_item_find(s->kind, key);
        if (!item) {
                const char *close = config_item_closest(s->kind, key);
                SectionKind k = close ? _SECTION_INVALID : config_item_section_of(s->kind, key);
                if (close)
                        return config_error(c, EINVAL,
                                            "%s:%u: unknown key '%s' in section [%s]; did you mean %s=?",
                                            name, line, key, section_kind_to_string(s->kind), close);
                if (k >= 0)
                        return config_error(c, EINVAL,
                                            "%s:%u: unknown key '%s' in section [%s]; %s= is a key of [%s]",
                                            name, line, key, section_kind_to_string(s->kind), key,
                                            section_kind_to_string(k));
                return config_error(
                        c, EINVAL,
                        "%s:%u: unknown key '%s' in section [%s]; modelgate.conf(5) lists its keys", name,
                        line, key, section_kind_to_string(s->kind));
        }
        char why[CONFIG_WHY_MAX] = "";
        int r = item->parse(value, (char *)s->check_base + item->offset, why);
        if (r == -ENOMEM)
                return log_oom();
        na = realloc(s->assignments, sizeof(Assignment) * (s->n_assignments + 1));
        if (!na)
                return log_oom();
        s->assignments = na;
        na[s->n_assignments] =
                (Assignment){.item = item, .value = strdup(value), .line = line, .bad = r < 0};
        if (!na[s->n_assignments].value)
                return log_oom();
        s->n_assignments++;
        if (r < 0)
                return config_error(c, EINVAL, "%s:%u: [%s] %s='%s' is not valid%s%s", name, line,
                                    section_kind_to_string(item->section), item->key, value,
                                    *why ? ": " : "", why);
        return 0;
}

int config_parse_text(Config *c, const char *name, const char *text, size_t size) {
        _cleanup_(section_done) Section s = {.kind = _SECTION_INVALID};
        _cleanup_free_ char *copy = NULL;
        unsigned line = 0;
        int r = 0, k;

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
                l = strstrip(p);
                if (*l == 0 || *l == '#' || *l == ';')
                        continue;
                /* every error of the file in one run: a line with an error is left out, the rest read */
                k = *l == '[' ? parse_section_header(c, name, line, l, &s)
                              : parse_assignment(c, name, line, l, &s);
                if (k == -ENOMEM)
                        return k;
                if (k < 0)
                        r = k;
        }
        k = section_apply(c, name, &s);
        return k < 0 && (r >= 0 || k == -ENOMEM) ? k : r;
}

/* 0; -ENOENT if there is no such file; -EINVAL with the errors said (a read that failed is one) */
static int config_load_one(Config *c, const char *path) {
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        int r;

        r = read_full_file(path, &text, &size);
        if (r == -ENOENT || r == -ENOMEM)
                return r;
        if (r < 0)
                return config_error(c, r, "Failed to read %s: %m", path), -EINVAL;
        return config_parse_text(c, path, text ?: "", size);
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* path.d/ *.conf, sorted */
static int config_dropins(Config *c, const char *dir, char ***ret, size_t *ret_n) {
        _cleanup_strv_free_ char **names = NULL;
        size_t n = 0;
        DIR *d;

        d = opendir(dir);
        if (!d)
                return errno == ENOENT ? 0 : (config_error(c, errno, "Failed to open %s: %m", dir), -EINVAL);
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
        *ret = TAKE_PTR(names);
        *ret_n = n;
        return 0;
}

int config_load(Config *c, const char *path) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_strv_free_ char **names = NULL;
        bool found = false;
        size_t n = 0;
        int r = 0, k;

        /* each file is read whatever the ones before had wrong, so that one run says every error */
        k = config_load_one(c, path);
        if (k == -ENOMEM)
                return k;
        if (k == -ENOENT)
                log_debug("%s does not exist, looking for drop-ins only", path);
        else
                found = true;
        if (k == -EINVAL)
                r = k;

        if (asprintf(&dir, "%s.d", path) < 0)
                return log_oom();
        k = config_dropins(c, dir, &names, &n);
        if (k == -ENOMEM)
                return k;
        if (k < 0)
                r = k;
        for (size_t i = 0; i < n; i++) {
                k = config_load_one(c, names[i]);
                if (k == -ENOMEM)
                        return k;
                if (k == -ENOENT) /* gone since the directory was read */
                        k = config_error(c, ENOENT, "Failed to read %s: %m", names[i]);
                if (k < 0)
                        r = -EINVAL;
                found = true;
        }
        if (!found && r >= 0)
                return config_error(
                        c, ENOENT,
                        "No configuration: neither %s nor %s.d/*.conf exists. See modelgate.conf(5).", path,
                        path);
        return r;
}

int config_read(Config *c, const char *path) {
        int r, k;

        r = config_load(c, path);
        if (r == -ENOMEM || r == -ENOENT)
                return r;
        /* what the files say is checked whatever errors they have, so that one run says every error */
        k = config_verify(c);
        if (k == -ENOMEM)
                return k;
        if (k < 0 && r >= 0)
                r = k;
        k = config_resolve(c);
        if (k == -ENOMEM)
                return k;
        return r < 0 ? r : k;
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
