/*  zyre_worker: one process of bench_zre.py running zyre (C) nodes.

    Our own driver against libzyre's public API (no code from zyre), the
    C counterpart of benchmarks/zre_worker.py: it speaks the same JSON
    lines, so bench_zre.py drives zyre as it drives trizre and pyre.
    scripts/build-zyre.sh compiles it beside the zyre it builds.

    Commands on stdin, one JSON object a line (only the keys below are
    read, by a plain search: the benchmark is the only writer):
        {"cmd":"mode","mode":"echo"|"idle"}
        {"cmd":"count","n":N,"slow":true|false,"stall":S}
        {"cmd":"pingpong","n":N,"size":B}
        {"cmd":"flood","n":N,"size":B}
        {"cmd":"shout","group":G,"n":N,"size":B}
        {"cmd":"status"}   {"cmd":"stop"} (EOF means the same)
    Events on stdout, each with "t" (CLOCK_MONOTONIC seconds, as Python's
    time.monotonic()) and "cpu" (this process's CPU seconds, all threads):
        started, mesh, exit, counting, counted, pingpong, sent, status,
        exiting -- with the fields zre_worker.py gives them.

    Options: --name N --nodes K --interface IF --port P --group G
             --expect-peers N --expect-group G --echo --evasive S
             --expired S --nofile N  (others zre_worker.py takes are
             accepted and ignored)

    zyre beacons on a real interface, so this program refuses to start
    (exit 3, the reason on stderr) unless it runs inside a namespace the
    benchmark made, on the veth end the benchmark gave it, and where
    tests/interop's ensure_in_test_namespace would let pyre run: see
    "safety" below.
*/

#define ZYRE_BUILD_DRAFT_API 1
#include <zyre.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <limits.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_NODES 1024
#define SLOW_EVERY 1000         //  the slow reader sleeps 1 ms every 1000
#define TEST_NETWORK 0x0AE70000 //  10.231.0.0/16, tests/support/netns.py's

static double
monotonic (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static double
cpu_time (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

//  Events: "{"event":NAME,<fields>,"t":..,"cpu":..}" on one line.
static void
emit_start (const char *event)
{
    printf ("{\"event\":\"%s\"", event);
}

static void
emit_end (void)
{
    printf (",\"t\":%.9f,\"cpu\":%.9f}\n", monotonic (), cpu_time ());
    fflush (stdout);
}

static void
emit (const char *event)
{
    emit_start (event);
    emit_end ();
}

static void
json_string (const char *text)
{
    putchar ('"');
    for (const unsigned char *p = (const unsigned char *) text; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf ("\\%c", *p);
        else
        if (*p < 0x20)
            printf ("\\u%04x", *p);
        else
            putchar (*p);
    }
    putchar ('"');
}

static void
lower_hex (const char *uuid, char out [33])
{
    size_t i;
    for (i = 0; uuid [i] && i < 32; i++)
        out [i] = (char) tolower ((unsigned char) uuid [i]);
    out [i] = 0;
}

//  -------------------------------------------------------------- safety
//
//  zyre broadcasts its beacons on the interface it is given, so before any
//  node exists every one of these must hold, or we refuse to start:
//
//  1.  our network namespace is one tests/support/netns.py made (a /run/netns
//      entry named trizre-* is this very namespace), and neither PID 1's
//      nor the harness's own ($TRIZRE_OUTER_NETNS; required when PID 1's
//      cannot be read, as for root without CAP_SYS_PTRACE);
//  2.  --interface names a veth end as tests/support/netns.py names them, tz<N>a
//      or tz<N>b, that exists here, is a veth, and has an IPv4 address in
//      the test network 10.231.0.0/16;
//  3.  every address of every interface here is loopback or in
//      10.231.0.0/16 (IPv4), loopback or link-local (IPv6), as
//      tests/interop's ensure_in_test_namespace asks of pyre.
//
//  Nothing here sends a packet: ethtool's ioctl needs a socket, but only
//  as a handle on the kernel.

#define NETNS_DIR    "/run/netns"
#define NETNS_PREFIX "trizre-"  //  tests/support/netns.py's PREFIX

static int
refuse (const char *why, const char *what)
{
    fprintf (stderr, "zyre_worker: refusing to start: %s%s%s\n",
             why, what ? ": " : "", what ? what : "");
    return 0;
}

static int
in_test_subnet (uint32_t ip)
{
    return (ip & 0xFFFF0000) == TEST_NETWORK;
}

//  1.  The namespace.
static int
namespace_is_ours (void)
{
    char own [64] = "", first [64] = "";
    ssize_t n = readlink ("/proc/self/ns/net", own, sizeof own - 1);
    struct stat self_ns;
    if (n <= 0 || stat ("/proc/self/ns/net", &self_ns))
        return refuse ("cannot read /proc/self/ns/net", NULL);
    own [n] = 0;

    const char *outer = getenv ("TRIZRE_OUTER_NETNS");
    if (outer && streq (own, outer))
        return refuse ("this is the harness's own network namespace", own);
    n = readlink ("/proc/1/ns/net", first, sizeof first - 1);
    if (n > 0) {
        first [n] = 0;
        if (streq (own, first))
            return refuse ("this is the machine's own network namespace", own);
    }
    else
    if (!outer || !*outer)
        return refuse ("PID 1's network namespace cannot be read here, and "
                       "TRIZRE_OUTER_NETNS (the harness's) is not set", NULL);

    //  Positively one of the benchmark's: ip netns add mounts each
    //  namespace at /run/netns/NAME, and tests/support/netns.py names them trizre-*.
    DIR *dir = opendir (NETNS_DIR);
    if (!dir)
        return refuse ("no " NETNS_DIR ": not started with `ip netns exec`", NULL);
    int found = 0;
    struct dirent *entry;
    while (!found && (entry = readdir (dir))) {
        if (strncmp (entry->d_name, NETNS_PREFIX, strlen (NETNS_PREFIX)))
            continue;
        char path [PATH_MAX];
        struct stat named;
        snprintf (path, sizeof path, NETNS_DIR "/%s", entry->d_name);
        if (stat (path, &named) == 0
        &&  named.st_dev == self_ns.st_dev && named.st_ino == self_ns.st_ino)
            found = 1;
    }
    closedir (dir);
    if (!found)
        return refuse ("this network namespace is none of the benchmark's "
                       "(" NETNS_DIR "/" NETNS_PREFIX "*)", own);
    return 1;
}

//  2.  The interface: tz<N>a or tz<N>b, N of 1 to 3 digits.
static int
veth_name (const char *name)
{
    size_t digits = strspn (name + 2, "0123456789");
    return strncmp (name, "tz", 2) == 0 && digits >= 1 && digits <= 3
        && (name [2 + digits] == 'a' || name [2 + digits] == 'b')
        && name [3 + digits] == 0;
}

static int
is_veth (const char *interface)
{
    int handle = socket (AF_INET, SOCK_DGRAM, 0);
    if (handle < 0)
        return 0;
    struct ethtool_drvinfo info = { .cmd = ETHTOOL_GDRVINFO };
    struct ifreq request;
    memset (&request, 0, sizeof request);
    snprintf (request.ifr_name, sizeof request.ifr_name, "%s", interface);
    request.ifr_data = (char *) &info;
    int ok = ioctl (handle, SIOCETHTOOL, &request) == 0 && streq (info.driver, "veth");
    close (handle);
    return ok;
}

static int
interface_is_ours (const char *interface)
{
    if (!interface)
        return refuse ("--interface is required (the namespace's veth end)", NULL);
    if (!veth_name (interface))
        return refuse ("--interface must be a veth end the benchmark made "
                       "(tz<N>a or tz<N>b)", interface);
    if (!if_nametoindex (interface))
        return refuse ("--interface names no interface of this namespace", interface);
    if (!is_veth (interface))
        return refuse ("--interface is not a veth", interface);
    return 1;
}

//  3.  Every address here; and the veth's own IPv4 address.
static int
addresses_are_ours (const char *interface)
{
    struct ifaddrs *addresses;
    if (getifaddrs (&addresses))
        return refuse ("getifaddrs failed", NULL);
    int ok = 1, veth_address = 0;
    for (struct ifaddrs *a = addresses; a && ok; a = a->ifa_next) {
        if (!a->ifa_addr)
            continue;
        if (a->ifa_addr->sa_family == AF_INET) {
            uint32_t ip = ntohl (((struct sockaddr_in *) a->ifa_addr)->sin_addr.s_addr);
            if ((ip >> 24) != 127 && !in_test_subnet (ip))
                ok = refuse ("an interface has an IPv4 address outside 127/8 and 10.231/16",
                             a->ifa_name);
            if (streq (a->ifa_name, interface) && in_test_subnet (ip))
                veth_address = 1;
        }
        else
        if (a->ifa_addr->sa_family == AF_INET6) {
            struct in6_addr *ip = &((struct sockaddr_in6 *) a->ifa_addr)->sin6_addr;
            if (!IN6_IS_ADDR_LOOPBACK (ip) && !IN6_IS_ADDR_LINKLOCAL (ip))
                ok = refuse ("an interface has an IPv6 address neither loopback nor link-local",
                             a->ifa_name);
        }
    }
    freeifaddrs (addresses);
    if (ok && !veth_address)
        return refuse ("--interface has no IPv4 address in 10.231/16", interface);
    return ok;
}

static int
in_test_namespace (const char *interface)
{
    return namespace_is_ours ()
        && interface_is_ours (interface)
        && addresses_are_ours (interface);
}

//  ----------------------------------------------------- what we track

typedef struct {
    size_t expected, received, reordered, dups;
    long high;
    double first, last;
    unsigned char *seen;
} counter_t;

typedef struct {
    zyre_t *node;
    void *socket;               //  libzmq's handle, for zmq_poll
    zhash_t *peers;             //  UUID string -> the same
    zhash_t *members;           //  peers in the expected group
    counter_t *counter;
    int slow;
} local_t;

typedef struct {
    local_t locals [MAX_NODES];
    int nodes;
    int expect_peers;
    const char *expect_group;
    const char *mode;           //  "idle", "echo", "count" (static strings)
    int mesh_reached;
    int counting;
    double progress, stall;
} worker_t;

static void
counter_destroy (counter_t **self_p)
{
    if (*self_p) {
        free ((*self_p)->seen);
        free (*self_p);
        *self_p = NULL;
    }
}

static counter_t *
counter_new (size_t expected)
{
    counter_t *self = (counter_t *) calloc (1, sizeof (counter_t));
    assert (self);
    self->expected = expected;
    self->high = -1;
    self->seen = (unsigned char *) calloc (expected ? expected : 1, 1);
    assert (self->seen);
    return self;
}

//  Counts one message (its first 8 octets are a big-endian sequence
//  number); true once all have come.
static int
counter_add (counter_t *self, zframe_t *frame)
{
    uint64_t seq = 0;
    byte *data = zframe_data (frame);
    for (size_t i = 0; i < 8 && i < zframe_size (frame); i++)
        seq = (seq << 8) | data [i];
    double now = monotonic ();
    if (!self->received)
        self->first = now;
    self->last = now;
    if (seq >= self->expected || self->seen [seq]) {
        self->dups++;
        return 0;
    }
    self->seen [seq] = 1;
    if ((long) seq < self->high)
        self->reordered++;
    else
        self->high = (long) seq;
    self->received++;
    return self->received >= self->expected;
}

static size_t
seen_count (worker_t *w, local_t *local)
{
    return zhash_size (w->expect_group ? local->members : local->peers);
}

static void
mesh_check (worker_t *w)
{
    if (w->mesh_reached)
        return;
    for (int i = 0; i < w->nodes; i++)
        if (seen_count (w, &w->locals [i]) < (size_t) w->expect_peers)
            return;
    w->mesh_reached = 1;
    emit ("mesh");
}

static void
report_counted (worker_t *w, int stalled)
{
    emit_start ("counted");
    printf (",\"nodes\":[");
    int first = 1;
    for (int i = 0; i < w->nodes; i++) {
        counter_t *c = w->locals [i].counter;
        if (!c)
            continue;
        printf ("%s{\"received\":%zu,\"lost\":%zu,\"reordered\":%zu,\"dups\":%zu,"
                "\"first\":%.9f,\"last\":%.9f}",
                first ? "" : ",", c->received, c->expected - c->received,
                c->reordered, c->dups, c->first, c->last);
        first = 0;
        counter_destroy (&w->locals [i].counter);
    }
    printf ("],\"stalled\":%s", stalled ? "true" : "false");
    emit_end ();
    w->mode = "idle";
    w->counting = 0;
}

//  A message: its 8-octet big-endian sequence number, then padding.
static zmsg_t *
payload (uint64_t seq, size_t size)
{
    byte buffer [65536];
    size_t length = size < 8 ? 8 : size;
    assert (length <= sizeof buffer);
    memset (buffer, 'x', length);
    for (int i = 7; i >= 0; i--, seq >>= 8)
        buffer [i] = (byte) (seq & 0xFF);
    zmsg_t *msg = zmsg_new ();
    zmsg_addmem (msg, buffer, length);
    return msg;
}

//  One event from a node's socket: [type, uuid, name, ...].
static void
handle (worker_t *w, local_t *local, int index, zmsg_t *msg)
{
    char *type = zmsg_popstr (msg);
    char *uuid = zmsg_popstr (msg);
    char *name = zmsg_popstr (msg);
    if (!type || !uuid || !name) {
        zstr_free (&type);
        zstr_free (&uuid);
        zstr_free (&name);
        return;
    }
    if (streq (type, "WHISPER") || streq (type, "SHOUT")) {
        if (streq (type, "SHOUT")) {
            char *group = zmsg_popstr (msg);
            zstr_free (&group);
        }
        zframe_t *content = zmsg_first (msg);
        if (streq (w->mode, "count") && local->counter && content) {
            counter_t *c = local->counter;
            if (counter_add (c, content) || !(c->received % 256))
                w->progress = monotonic ();
            if (local->slow && !(c->received % SLOW_EVERY))
                zclock_sleep (1);
        }
        else
        if (streq (w->mode, "echo") && streq (type, "WHISPER")) {
            zmsg_t *reply = zmsg_dup (msg);
            zyre_whisper (local->node, uuid, &reply);
        }
    }
    else
    if (streq (type, "ENTER")) {
        zhash_insert (local->peers, uuid, strdup (uuid));
        mesh_check (w);
    }
    else
    if (streq (type, "JOIN") || streq (type, "LEAVE")) {
        char *group = zmsg_popstr (msg);
        if (group && w->expect_group && streq (group, w->expect_group)) {
            if (streq (type, "JOIN")) {
                zhash_insert (local->members, uuid, strdup (uuid));
                mesh_check (w);
            }
            else
                zhash_delete (local->members, uuid);
        }
        zstr_free (&group);
    }
    else
    if (streq (type, "EXIT")) {
        zhash_delete (local->peers, uuid);
        zhash_delete (local->members, uuid);
        char hex [33];
        lower_hex (uuid, hex);
        emit_start ("exit");
        printf (",\"node\":%d,\"peer\":\"%s\",\"name\":", index, hex);
        json_string (name);
        emit_end ();
    }
    zstr_free (&type);
    zstr_free (&uuid);
    zstr_free (&name);
}

static void
drain (worker_t *w, int index)
{
    local_t *local = &w->locals [index];
    for (int i = 0; i < 1000; i++) {
        if (!(zsock_events (zyre_socket (local->node)) & ZMQ_POLLIN))
            return;
        zmsg_t *msg = zyre_recv (local->node);
        if (!msg)
            return;
        handle (w, local, index, msg);
        zmsg_destroy (&msg);
    }
}

//  The first peer a node knows (the benchmark's pairs have one).
static const char *
target (local_t *local)
{
    const char *peer = (const char *) zhash_first (local->peers);
    if (!peer) {
        emit_start ("error");
        printf (",\"error\":\"no peer to send to\"");
        emit_end ();
    }
    return peer;
}

static int
compare_doubles (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static void
pingpong (worker_t *w, size_t n, size_t size)
{
    local_t *local = &w->locals [0];
    const char *found = target (local);
    if (!found)
        return;
    char *peer = strdup (found);
    double *rtts = (double *) calloc (n ? n : 1, sizeof (double));
    assert (rtts);
    double cpu0 = cpu_time (), start = monotonic ();
    for (size_t i = 0; i < n; i++) {
        double sent = monotonic ();
        zmsg_t *msg = payload (0, size);
        zyre_whisper (local->node, peer, &msg);
        while (1) {
            zmsg_t *in = zyre_recv (local->node);
            if (!in)
                break;
            char *type = zmsg_popstr (in);
            if (type && streq (type, "WHISPER")) {
                zstr_free (&type);
                zmsg_destroy (&in);
                break;
            }
            if (type)
                zmsg_pushstr (in, type);
            zstr_free (&type);
            handle (w, local, 0, in);
            zmsg_destroy (&in);
        }
        rtts [i] = monotonic () - sent;
    }
    double elapsed = monotonic () - start;
    qsort (rtts, n, sizeof (double), compare_doubles);
    size_t p50 = n / 2, p99 = (size_t) (0.99 * (double) n);
    if (p99 >= n)
        p99 = n - 1;
    emit_start ("pingpong");
    printf (",\"cpu0\":%.9f,\"rate\":%.3f,\"p50_us\":%.3f,\"p99_us\":%.3f",
            cpu0, (double) n / elapsed, rtts [p50] * 1e6, rtts [p99] * 1e6);
    emit_end ();
    free (rtts);
    free (peer);
}

static void
flood (worker_t *w, size_t n, size_t size, const char *group)
{
    local_t *local = &w->locals [0];
    char *peer = NULL;
    if (!group) {
        const char *found = target (local);
        if (!found)
            return;
        peer = strdup (found);
    }
    double cpu0 = cpu_time (), first = monotonic ();
    for (size_t seq = 0; seq < n; seq++) {
        zmsg_t *msg = payload (seq, size);
        if (group)
            zyre_shout (local->node, group, &msg);
        else
            zyre_whisper (local->node, peer, &msg);
    }
    emit_start ("sent");
    printf (",\"first\":%.9f,\"last\":%.9f,\"cpu0\":%.9f", first, monotonic (), cpu0);
    emit_end ();
    free (peer);
}

//  ---------------------------------------------------------- commands

//  The value after "key": in a line we wrote ourselves; NULL if absent.
static const char *
field (const char *line, const char *key)
{
    char quoted [64];
    snprintf (quoted, sizeof quoted, "\"%s\"", key);
    const char *at = strstr (line, quoted);
    if (!at)
        return NULL;
    at += strlen (quoted);
    while (*at == ' ' || *at == ':')
        at++;
    return at;
}

static double
number (const char *line, const char *key, double otherwise)
{
    const char *at = field (line, key);
    return at ? atof (at) : otherwise;
}

//  A string value, copied into out (no escapes: ours are plain names).
static int
text (const char *line, const char *key, char *out, size_t size)
{
    const char *at = field (line, key);
    if (!at || *at != '"')
        return 0;
    at++;
    size_t i = 0;
    while (at [i] && at [i] != '"' && i + 1 < size) {
        out [i] = at [i];
        i++;
    }
    out [i] = 0;
    return 1;
}

//  False once told to stop.
static int
command (worker_t *w, const char *line)
{
    char cmd [32] = "", value [256] = "";
    if (!text (line, "cmd", cmd, sizeof cmd))
        return 1;
    if (streq (cmd, "stop"))
        return 0;
    if (streq (cmd, "mode")) {
        text (line, "mode", value, sizeof value);
        w->mode = streq (value, "echo") ? "echo" : streq (value, "count") ? "count" : "idle";
    }
    else
    if (streq (cmd, "count")) {
        size_t n = (size_t) number (line, "n", 0);
        const char *slow = field (line, "slow");
        for (int i = 0; i < w->nodes; i++) {
            counter_destroy (&w->locals [i].counter);
            w->locals [i].counter = counter_new (n);
            w->locals [i].slow = slow && strncmp (slow, "true", 4) == 0;
        }
        w->mode = "count";
        w->counting = 1;
        w->progress = monotonic ();
        w->stall = number (line, "stall", 5.0);
        emit ("counting");
    }
    else
    if (streq (cmd, "pingpong"))
        pingpong (w, (size_t) number (line, "n", 0), (size_t) number (line, "size", 100));
    else
    if (streq (cmd, "flood"))
        flood (w, (size_t) number (line, "n", 0), (size_t) number (line, "size", 100), NULL);
    else
    if (streq (cmd, "shout")) {
        text (line, "group", value, sizeof value);
        flood (w, (size_t) number (line, "n", 0), (size_t) number (line, "size", 100), value);
    }
    else
    if (streq (cmd, "status")) {
        emit_start ("status");
        printf (",\"peers\":[");
        for (int i = 0; i < w->nodes; i++)
            printf ("%s%zu", i ? "," : "", zhash_size (w->locals [i].peers));
        printf ("]");
        emit_end ();
    }
    else {
        emit_start ("error");
        printf (",\"error\":\"unknown command ");
        json_string (cmd);
        printf ("\"");
        emit_end ();
    }
    return 1;
}

//  Reads what stdin has and runs each whole line; false on stop or EOF.
static int
read_commands (worker_t *w, char *buffer, size_t *used, size_t size)
{
    ssize_t got = read (0, buffer + *used, size - *used - 1);
    if (got <= 0)
        return 0;
    *used += (size_t) got;
    buffer [*used] = 0;
    char *line = buffer, *newline;
    int running = 1;
    while (running && (newline = strchr (line, '\n'))) {
        *newline = 0;
        running = command (w, line);
        line = newline + 1;
    }
    *used = strlen (line);
    memmove (buffer, line, *used + 1);
    return running;
}

//  ------------------------------------------------------------- main

//  A started node beaconing on interface, never on zyre's own choice of
//  interface (which would be the machine's first one that broadcasts).
static zyre_t *
start_node (const char *name, const char *interface, int port,
            double evasive, double expired)
{
    if (!interface || !*interface) {
        refuse ("no interface to beacon on", name);
        return NULL;
    }
    zyre_t *node = zyre_new (name);
    if (!node)
        return NULL;
    zyre_set_port (node, port);
    zyre_set_interface (node, interface);
    zyre_set_evasive_timeout (node, (int) (evasive * 1000));
    zyre_set_expired_timeout (node, (int) (expired * 1000));
    if (zyre_start (node)) {
        fprintf (stderr, "zyre_worker: zyre_start failed for %s\n", name);
        zyre_destroy (&node);
    }
    return node;
}


int
main (int argc, char *argv [])
{
    static worker_t w;
    const char *name = "node", *interface = NULL, *group = NULL;
    int port = 5670, echo = 0;
    double evasive = 5.0, expired = 30.0;
    long nofile = 0;
    w.nodes = 1;
    w.mode = "idle";
    for (int i = 1; i < argc; i++) {
        const char *arg = argv [i], *next = i + 1 < argc ? argv [i + 1] : NULL;
        if (streq (arg, "--echo"))
            echo = 1;
        else
        if (streq (arg, "--beacons-refresh"))
            ;   //  zyre always beacons on
        else
        if (!next) {
            fprintf (stderr, "zyre_worker: %s needs a value\n", arg);
            return 2;
        }
        else {
            if (streq (arg, "--name")) name = next;
            else if (streq (arg, "--nodes")) w.nodes = atoi (next);
            else if (streq (arg, "--interface")) interface = next;
            else if (streq (arg, "--port")) port = atoi (next);
            else if (streq (arg, "--group")) group = next;
            else if (streq (arg, "--expect-peers")) w.expect_peers = atoi (next);
            else if (streq (arg, "--expect-group")) w.expect_group = next;
            else if (streq (arg, "--evasive")) evasive = atof (next);
            else if (streq (arg, "--expired")) expired = atof (next);
            else if (streq (arg, "--nofile")) nofile = atol (next);
            else if (streq (arg, "--impl") || streq (arg, "--address")
                  || streq (arg, "--connect"))
                ;   //  zre_worker.py's; nothing to do here
            else {
                fprintf (stderr, "zyre_worker: unknown option %s\n", arg);
                return 2;
            }
            i++;
        }
    }
    if (w.nodes < 1 || w.nodes > MAX_NODES) {
        fprintf (stderr, "zyre_worker: --nodes must be 1..%d\n", MAX_NODES);
        return 2;
    }
    if (!in_test_namespace (interface))
        return 3;
    if (nofile > 0) {
        struct rlimit limit;
        getrlimit (RLIMIT_NOFILE, &limit);
        rlim_t want = (rlim_t) nofile;
        limit.rlim_cur = want < limit.rlim_max ? want : limit.rlim_max;
        setrlimit (RLIMIT_NOFILE, &limit);
    }
    zsys_set_max_sockets (0);   //  as many as the descriptor limit allows
    zsys_set_ipv6 (0);          //  IPv4 broadcast on the veth, whatever $ZSYS_IPV6 says
    //  czmq logs to stdout by default, into the middle of our event lines.
    zsys_set_logstream (stderr);

    double t0 = monotonic ();
    for (int i = 0; i < w.nodes; i++) {
        char node_name [256];
        if (w.nodes == 1)
            snprintf (node_name, sizeof node_name, "%s", name);
        else
            snprintf (node_name, sizeof node_name, "%s%d", name, i);
        local_t *local = &w.locals [i];
        local->node = start_node (node_name, interface, port, evasive, expired);
        if (!local->node)
            return 4;
        if (group)
            zyre_join (local->node, group);
        local->socket = zsock_resolve (zyre_socket (local->node));
        local->peers = zhash_new ();
        zhash_autofree (local->peers);
        local->members = zhash_new ();
        zhash_autofree (local->members);
    }
    emit_start ("started");
    printf (",\"t0\":%.9f,\"pid\":%d,\"uuids\":[", t0, (int) getpid ());
    for (int i = 0; i < w.nodes; i++) {
        char hex [33];
        lower_hex (zyre_uuid (w.locals [i].node), hex);
        printf ("%s\"%s\"", i ? "," : "", hex);
    }
    printf ("],\"endpoint\":null");
    emit_end ();
    mesh_check (&w);
    if (echo)
        w.mode = "echo";

    zmq_pollitem_t *items = (zmq_pollitem_t *) calloc ((size_t) w.nodes + 1, sizeof *items);
    assert (items);
    items [0].fd = 0;
    items [0].events = ZMQ_POLLIN;
    for (int i = 0; i < w.nodes; i++) {
        items [i + 1].socket = w.locals [i].socket;
        items [i + 1].events = ZMQ_POLLIN;
    }
    static char buffer [1 << 16];
    size_t used = 0;
    int running = 1;
    while (running) {
        if (zmq_poll (items, w.nodes + 1, 50) < 0)
            break;
        if (items [0].revents & ZMQ_POLLIN)
            running = read_commands (&w, buffer, &used, sizeof buffer);
        for (int i = 0; running && i < w.nodes; i++)
            if (items [i + 1].revents & ZMQ_POLLIN)
                drain (&w, i);
        if (w.counting) {
            int done = 1;
            for (int i = 0; i < w.nodes; i++) {
                counter_t *c = w.locals [i].counter;
                if (c && c->received < c->expected)
                    done = 0;
            }
            if (done)
                report_counted (&w, 0);
            else
            if (monotonic () - w.progress > w.stall)
                report_counted (&w, 1);
        }
    }
    emit ("exiting");
    //  Leave at once, as zre_worker.py does: the benchmark kills what stays.
    _exit (0);
}
