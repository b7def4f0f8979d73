/* mqd-passwd: makes a [user NAME] section for mqd.conf. Reads the password from stdin
 * (without echo, and asked twice, when stdin is a terminal) and prints
 *   [user NAME]
 *   password_hash = pbkdf2-sha256$...        (--plain: SASL PLAIN)
 *   scram_sha256 = ITER$SALT$STOREDKEY$SERVERKEY   (--scram: SASL SCRAM-SHA-256)
 * (--both, the default, prints both) so `mqd-passwd alice >> /etc/mqd.conf` adds a user
 * who can log in on the installed config: its plain-TCP listener offers SCRAM-SHA-256
 * only (allow_plain_without_tls = off), and PLAIN over TLS (Proton Python, which has no
 * SCRAM client on Debian) needs the password_hash. */
#include "config.h"
#include "conf/conf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#define PW_MAX 1024

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mqd-passwd [--both|--plain|--scram] [--iterations N] USER\n"
            "Reads a password from stdin and prints a [user USER] section for mqd.conf.\n"
            "  --both           both lines below (the default): the user can log in with\n"
            "                   SCRAM-SHA-256 anywhere and with PLAIN over TLS\n"
            "  --plain          password_hash only, for SASL PLAIN (any password)\n"
            "  --scram          scram_sha256 only, for SASL SCRAM-SHA-256 (ASCII passwords)\n"
            "  --iterations N   PBKDF2 iterations (default %u for --plain, %u for --scram;\n"
            "                   at least %u)\n",
            MQD_CONF_PBKDF2_ITERATIONS, MQD_CONF_SCRAM_ITERATIONS, MQD_CONF_PBKDF2_MIN_ITERATIONS);
}

/* Reads one line from stdin into buf without the newline; no echo on a terminal. */
static int read_password(const char *prompt, char *buf, size_t len)
{
    struct termios old, quiet;
    bool tty = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &old) == 0;
    int rc = 0;
    if (tty) {
        fputs(prompt, stderr);
        quiet = old;
        quiet.c_lflag &= ~(tcflag_t)ECHO;
        quiet.c_lflag |= ECHONL;
        if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) != 0)
            return -1;
    }
    if (fgets(buf, (int)len, stdin) == NULL)
        rc = -1;
    else
        buf[strcspn(buf, "\r\n")] = '\0';
    if (tty)
        (void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
    return rc;
}

static bool valid_user(const char *u)
{
    if (*u == '\0' || strlen(u) > 255)
        return false;
    for (; *u; u++)
        if ((unsigned char)*u <= ' ' || strchr("[]#=", *u) != NULL)
            return false;
    return true;
}

enum { OUT_PLAIN = 1, OUT_SCRAM = 2 };

static int parse_args(int argc, char **argv, uint32_t *iterations, int *what, const char **user)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(argv[i], "--plain") == 0 || strcmp(argv[i], "--scram") == 0 ||
            strcmp(argv[i], "--both") == 0) {
            *what = argv[i][2] == 'p' ? OUT_PLAIN : argv[i][2] == 's' ? OUT_SCRAM : OUT_PLAIN | OUT_SCRAM;
            continue;
        }
        if (strcmp(argv[i], "--iterations") != 0 || i + 1 >= argc)
            return -1;
        char *end;
        errno = 0;
        unsigned long n = strtoul(argv[++i], &end, 10);
        if (*end != '\0' || errno != 0 || n < MQD_CONF_PBKDF2_MIN_ITERATIONS ||
            n > MQD_CONF_PBKDF2_MAX_ITERATIONS) {
            fprintf(stderr, "mqd-passwd: --iterations: expected %u..%u\n",
                    MQD_CONF_PBKDF2_MIN_ITERATIONS, MQD_CONF_PBKDF2_MAX_ITERATIONS);
            return -1;
        }
        *iterations = (uint32_t)n;
    }
    if (i + 1 != argc || !valid_user(argv[i]))
        return -1;
    *user = argv[i];
    return 0;
}

/* --sas NAME: a [sas_key NAME] section with a fresh random key (no password). */
static int print_sas(const char *name)
{
    char key[64];
    if (!valid_user(name) || mqd_conf_sas_key_make(key, sizeof key) != 0)
        return 1;
    printf("[sas_key %s]\nkey = %s\nrights = send,listen,manage\nscope = *\n", name, key);
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    static char pw[PW_MAX], again[PW_MAX];
    char hash[160], scram[256];
    uint32_t iterations = 0;
    int what = OUT_PLAIN | OUT_SCRAM;
    const char *user = NULL;
    int status = 1;

    if (argc == 3 && strcmp(argv[1], "--sas") == 0)
        return print_sas(argv[2]);
    if (parse_args(argc, argv, &iterations, &what, &user) != 0) {
        usage(stderr);
        return 2;
    }
    if (read_password("Password: ", pw, sizeof pw) != 0) {
        fprintf(stderr, "mqd-passwd: no password read\n");
        goto out;
    }
    if (isatty(STDIN_FILENO) &&
        (read_password("Again: ", again, sizeof again) != 0 || strcmp(pw, again) != 0)) {
        fprintf(stderr, "mqd-passwd: the passwords differ\n");
        goto out;
    }
    if (pw[0] == '\0') {
        fprintf(stderr, "mqd-passwd: empty password refused\n");
        goto out;
    }
    for (const unsigned char *p = (const unsigned char *)pw; (what & OUT_SCRAM) && *p; p++) {
        if (*p < 0x20 || *p > 0x7e) {
            /* SCRAM wants SASLprep'd UTF-8; for printable ASCII that is the identity, and
             * we would rather refuse than store a key a client computes differently */
            fprintf(stderr, "mqd-passwd: SCRAM (--both, the default, and --scram) takes printable "
                            "ASCII passwords only; --plain takes any\n");
            goto out;
        }
    }
    int rc = (what & OUT_PLAIN) ? mqd_conf_password_hash(pw, iterations, hash, sizeof hash) : 0;
    if (rc == 0 && (what & OUT_SCRAM))
        rc = mqd_conf_scram_make(pw, iterations, scram, sizeof scram);
    if (rc != 0) {
        fprintf(stderr, "mqd-passwd: %s\n", mqd_strerror(rc));
        goto out;
    }
    printf("[user %s]\n", user);
    if (what & OUT_PLAIN)
        printf("password_hash = %s\n", hash);
    if (what & OUT_SCRAM)
        printf("scram_sha256 = %s\n", scram);
    status = fflush(stdout) == 0 ? 0 : 1;
out:
    memset(pw, 0, sizeof pw);
    memset(again, 0, sizeof again);
    return status;
}
