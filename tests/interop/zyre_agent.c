/*  zyre_agent: one zyre node driven over lines, for trizre's interop tests.

    Our own test driver against libzyre's public API (no code from zyre).
    scripts/build-zyre.sh compiles it beside the zyre it builds.  Run it
    only inside a network namespace a test created (zyre beacons on a real
    interface).

    Events go to stdout as JSON objects, one per line, in the vocabulary
    of tests/interop/__init__.py:
        {"event":"started","uuid":HEX,"name":..,"public_key":Z85|null}
        {"event":"ENTER","peer":HEX,"name":..,"headers":{..},"endpoint":..}
        {"event":"WHISPER","peer":HEX,"name":..,"frames":[BASE64..]}
        {"event":"SHOUT","peer":HEX,"name":..,"group":G,"frames":[..]}
        {"event":"JOIN"|"LEAVE","peer":HEX,"name":..,"group":G}
        {"event":"EXIT"|"EVASIVE"|"SILENT","peer":HEX,"name":..}
        {"event":"LEADER","peer":HEX,"name":..,"group":G}
        {"event":"peers","peers":[HEX..]}   {"event":"exiting"}
    Commands come on stdin, one per line, words separated by spaces,
    frames in base64:
        join G | leave G | whisper HEX B64.. | shout G B64.. | peers | stop

    Options:
        --name N  --interface IF  --port P  --interval MS  --evasive MS
        --expired MS  --group G (repeatable)  --header K=V (repeatable)
        --curve-cert FILE  (zcert_load; --curve makes a fresh key pair)
        --allow DIR | --allow-any   (zauth's CURVE allow-list)
        --zap-domain D  --contest G (repeatable)  --verbose
        --endpoint E  --gossip-bind E  --gossip-connect E   (gossip mode)
        --gossip-server-key Z85   (zyre_gossip_connect_curve: the hub's public
                                   key; needs --curve or --curve-cert)
        --max-seconds S
*/

#define ZYRE_BUILD_DRAFT_API 1
#include <zyre.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <ctype.h>

static zarmour_t *armour;

static void
json_string (const char *text)
{
    putchar ('"');
    for (const unsigned char *p = (const unsigned char *) (text ? text : ""); *p; p++) {
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
print_frames (zmsg_t *msg)
{
    printf (",\"frames\":[");
    int first = 1;
    for (zframe_t *frame = zmsg_first (msg); frame; frame = zmsg_next (msg)) {
        char *text = zarmour_encode (armour, zframe_data (frame), zframe_size (frame));
        printf ("%s", first ? "" : ",");
        json_string (text);
        free (text);
        first = 0;
    }
    printf ("]");
}

static void
print_event (zyre_event_t *event)
{
    const char *type = zyre_event_type (event);
    printf ("{\"event\":");
    json_string (type);
    printf (",\"peer\":");
    char hex [33];
    //  zyre gives the UUID in upper-case hex; the tests use lower case.
    const char *uuid = zyre_event_peer_uuid (event);
    size_t i;
    for (i = 0; uuid && uuid [i] && i < 32; i++)
        hex [i] = (char) tolower ((unsigned char) uuid [i]);
    hex [i] = 0;
    json_string (hex);
    printf (",\"name\":");
    json_string (zyre_event_peer_name (event));
    if (streq (type, "ENTER")) {
        printf (",\"endpoint\":");
        json_string (zyre_event_peer_addr (event));
        printf (",\"headers\":{");
        zhash_t *headers = zyre_event_headers (event);
        int first = 1;
        if (headers) {
            for (char *value = (char *) zhash_first (headers); value;
                 value = (char *) zhash_next (headers)) {
                printf ("%s", first ? "" : ",");
                json_string (zhash_cursor (headers));
                putchar (':');
                json_string (value);
                first = 0;
            }
        }
        printf ("}");
    }
    if (zyre_event_group (event)) {
        printf (",\"group\":");
        json_string (zyre_event_group (event));
    }
    if (streq (type, "WHISPER") || streq (type, "SHOUT"))
        print_frames (zyre_event_msg (event));
    printf ("}\n");
    fflush (stdout);
}

static zmsg_t *
frames_from (char *rest)
{
    zmsg_t *msg = zmsg_new ();
    for (char *word = strtok (rest, " "); word; word = strtok (NULL, " ")) {
        zchunk_t *chunk = zarmour_decode (armour, word);
        if (chunk) {
            //  zarmour_decode appends a NUL for convenience and counts it.
            size_t size = zchunk_size (chunk);
            zmsg_addmem (msg, zchunk_data (chunk), size ? size - 1 : 0);
            zchunk_destroy (&chunk);
        }
        else
            zmsg_addmem (msg, "", 0);
    }
    return msg;
}

//  Returns 0 to go on, -1 to stop.
static int
obey (zyre_t *node, char *line)
{
    line [strcspn (line, "\r\n")] = 0;
    char *rest = strchr (line, ' ');
    if (rest)
        *rest++ = 0;
    if (streq (line, "stop"))
        return -1;
    if (streq (line, "join") && rest)
        zyre_join (node, rest);
    else
    if (streq (line, "leave") && rest)
        zyre_leave (node, rest);
    else
    if (streq (line, "peers")) {
        zlist_t *peers = zyre_peers (node);
        printf ("{\"event\":\"peers\",\"peers\":[");
        int first = 1;
        for (char *peer = (char *) zlist_first (peers); peer; peer = (char *) zlist_next (peers)) {
            char hex [33];
            size_t i;
            for (i = 0; peer [i] && i < 32; i++)
                hex [i] = (char) tolower ((unsigned char) peer [i]);
            hex [i] = 0;
            printf ("%s", first ? "" : ",");
            json_string (hex);
            first = 0;
        }
        printf ("]}\n");
        fflush (stdout);
        zlist_destroy (&peers);
    }
    else
    if ((streq (line, "whisper") || streq (line, "shout")) && rest) {
        char *target = rest;
        char *frames = strchr (rest, ' ');
        if (frames)
            *frames++ = 0;
        zmsg_t *msg = frames_from (frames ? frames : (char *) "");
        if (streq (line, "whisper")) {
            //  zyre keys peers by upper-case hex
            for (char *p = target; *p; p++)
                *p = (char) toupper ((unsigned char) *p);
            zyre_whisper (node, target, &msg);
        }
        else
            zyre_shout (node, target, &msg);
    }
    else {
        printf ("{\"event\":\"error\",\"error\":");
        json_string (line);
        printf ("}\n");
        fflush (stdout);
    }
    return 0;
}

int
main (int argc, char *argv [])
{
    const char *name = NULL, *iface = NULL, *cert_file = NULL, *allow = NULL;
    const char *zap_domain = NULL, *endpoint = NULL, *gossip_bind = NULL;
    const char *gossip_connect = NULL, *gossip_server_key = NULL;
    int port = 0, interval = 0, evasive = 0, expired = 0, verbose = 0, curve = 0;
    double max_seconds = 60;
    zlist_t *groups = zlist_new ();
    zlist_t *headers = zlist_new ();
    zlist_t *contests = zlist_new ();
    for (int i = 1; i < argc; i++) {
        const char *arg = argv [i];
        const char *value = i + 1 < argc ? argv [i + 1] : NULL;
        if (streq (arg, "--verbose")) { verbose = 1; continue; }
        if (streq (arg, "--curve")) { curve = 1; continue; }
        if (streq (arg, "--allow-any")) { allow = CURVE_ALLOW_ANY; continue; }
        if (!value) {
            fprintf (stderr, "zyre_agent: %s needs a value\n", arg);
            return 2;
        }
        i++;
        if (streq (arg, "--name")) name = value;
        else if (streq (arg, "--interface")) iface = value;
        else if (streq (arg, "--port")) port = atoi (value);
        else if (streq (arg, "--interval")) interval = atoi (value);
        else if (streq (arg, "--evasive")) evasive = atoi (value);
        else if (streq (arg, "--expired")) expired = atoi (value);
        else if (streq (arg, "--group")) zlist_append (groups, (void *) value);
        else if (streq (arg, "--header")) zlist_append (headers, (void *) value);
        else if (streq (arg, "--contest")) zlist_append (contests, (void *) value);
        else if (streq (arg, "--curve-cert")) { cert_file = value; curve = 1; }
        else if (streq (arg, "--allow")) allow = value;
        else if (streq (arg, "--zap-domain")) zap_domain = value;
        else if (streq (arg, "--endpoint")) endpoint = value;
        else if (streq (arg, "--gossip-bind")) gossip_bind = value;
        else if (streq (arg, "--gossip-connect")) gossip_connect = value;
        else if (streq (arg, "--gossip-server-key")) gossip_server_key = value;
        else if (streq (arg, "--max-seconds")) max_seconds = atof (value);
        else {
            fprintf (stderr, "zyre_agent: unknown option %s\n", arg);
            return 2;
        }
    }
    //  czmq logs to stdout by default: keep our JSON lines whole.
    zsys_set_logstream (stderr);
    armour = zarmour_new ();
    zarmour_set_mode (armour, ZARMOUR_MODE_BASE64_STD);
    zarmour_set_line_breaks (armour, false);

    zyre_t *node = zyre_new (name);
    if (verbose)
        zyre_set_verbose (node);
    if (iface)
        zyre_set_interface (node, iface);
    if (port)
        zyre_set_port (node, port);
    if (interval)
        zyre_set_interval (node, (size_t) interval);
    if (evasive)
        zyre_set_evasive_timeout (node, evasive);
    if (expired)
        zyre_set_expired_timeout (node, expired);
    for (char *header = (char *) zlist_first (headers); header;
         header = (char *) zlist_next (headers)) {
        char *eq = strchr (header, '=');
        if (eq) {
            *eq = 0;
            zyre_set_header (node, header, "%s", eq + 1);
        }
    }
    zactor_t *auth = NULL;
    zcert_t *cert = NULL;
    if (curve) {
        if (!zsys_has_curve ()) {
            fprintf (stderr, "zyre_agent: this libzmq has no CURVE\n");
            return 3;
        }
        auth = zactor_new (zauth, NULL);
        if (verbose) {
            zstr_sendx (auth, "VERBOSE", NULL);
            zsock_wait (auth);
        }
        zstr_sendx (auth, "CURVE", allow ? allow : CURVE_ALLOW_ANY, NULL);
        zsock_wait (auth);
        if (zap_domain)
            zyre_set_zap_domain (node, zap_domain);
        cert = cert_file ? zcert_load (cert_file) : zcert_new ();
        if (!cert) {
            fprintf (stderr, "zyre_agent: cannot load certificate %s\n", cert_file);
            return 3;
        }
        zyre_set_zcert (node, cert);
        zyre_set_header (node, "X-PUBLICKEY", "%s", zcert_public_txt (cert));
    }
    //  Gossip mode, as zpinger -e/-g does it: an explicit endpoint, no beacons.
    if (endpoint && zyre_set_endpoint (node, "%s", endpoint)) {
        fprintf (stderr, "zyre_agent: cannot bind endpoint %s\n", endpoint);
        return 4;
    }
    if (gossip_bind)
        zyre_gossip_bind (node, "%s", gossip_bind);
    //  zyre hands its certificate to zgossip at this call: set it first (above).
    if (gossip_connect && gossip_server_key)
        zyre_gossip_connect_curve (node, gossip_server_key, "%s", gossip_connect);
    else
    if (gossip_connect)
        zyre_gossip_connect (node, "%s", gossip_connect);
    if (zyre_start (node)) {
        fprintf (stderr, "zyre_agent: zyre_start failed\n");
        return 4;
    }
    for (char *group = (char *) zlist_first (groups); group; group = (char *) zlist_next (groups))
        zyre_join (node, group);
    for (char *group = (char *) zlist_first (contests); group;
         group = (char *) zlist_next (contests))
        zyre_set_contest_in_group (node, group);

    //  Ask zyre before printing: its answers log lines of their own.
    const char *uuid = zyre_uuid (node);
    const char *own_name = zyre_name (node);
    printf ("{\"event\":\"started\",\"uuid\":");
    char hex [33];
    size_t n;
    for (n = 0; uuid [n] && n < 32; n++)
        hex [n] = (char) tolower ((unsigned char) uuid [n]);
    hex [n] = 0;
    json_string (hex);
    printf (",\"name\":");
    json_string (own_name);
    printf (",\"public_key\":");
    if (cert)
        json_string (zcert_public_txt (cert));
    else
        printf ("null");
    printf ("}\n");
    fflush (stdout);

    zmq_pollitem_t items [] = {
        { zsock_resolve (zyre_socket (node)), 0, ZMQ_POLLIN, 0 },
        { NULL, 0, ZMQ_POLLIN, 0 },
    };
    int64_t deadline = zclock_mono () + (int64_t) (max_seconds * 1000);
    static char pending [1 << 20];
    size_t held = 0;
    int stdin_open = 1;
    int stopping = 0;
    while (!stopping && zclock_mono () < deadline) {
        int rc = zmq_poll (items, stdin_open ? 2 : 1, 200);
        if (rc < 0)
            break;
        if (items [0].revents & ZMQ_POLLIN) {
            zyre_event_t *event = zyre_event_new (node);
            if (!event)
                break;
            print_event (event);
            zyre_event_destroy (&event);
        }
        if (stdin_open && (items [1].revents & (ZMQ_POLLIN | ZMQ_POLLERR))) {
            //  read(2), not stdio: poll only sees what stdio has not buffered.
            ssize_t got = read (0, pending + held, sizeof pending - held - 1);
            if (got <= 0) {
                stdin_open = 0;
                break;  //  EOF means stop
            }
            held += (size_t) got;
            pending [held] = 0;
            char *start = pending, *end;
            while (!stopping && (end = strchr (start, '\n'))) {
                *end = 0;
                stopping = obey (node, start) < 0;
                start = end + 1;
            }
            held -= (size_t) (start - pending);
            memmove (pending, start, held);
        }
    }
    zyre_stop (node);
    zyre_destroy (&node);
    zactor_destroy (&auth);
    zcert_destroy (&cert);
    zarmour_destroy (&armour);
    zlist_destroy (&groups);
    zlist_destroy (&headers);
    zlist_destroy (&contests);
    printf ("{\"event\":\"exiting\"}\n");
    fflush (stdout);
    return 0;
}
