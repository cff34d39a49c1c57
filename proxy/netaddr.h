/* IPv4/IPv6 addresses: CIDR ranges for trusted_proxies, client addresses, listen addresses. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct cidr {
    int family;             /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    unsigned prefix_len;
};

/* Parses "10.0.0.0/8", "::1/128" or a bare address (full-length prefix).
 * Returns 0 or -EINVAL. */
int cidr_parse(const char *text, struct cidr *out);

/* True when the socket address lies in one of the n ranges. IPv4-mapped IPv6 addresses
 * match IPv4 ranges. */
bool cidr_match_sockaddr(const struct cidr *ranges, size_t n, const struct sockaddr *sa);

/* Same, for an address in text form (from X-Forwarded-For). False for unparsable text. */
bool cidr_match_text(const struct cidr *ranges, size_t n, const char *text, size_t len);

/* Fills *ss for an IP literal (v4 or v6, no brackets) and port. Returns 0, or -EINVAL
 * when host is not an IP address. */
int sockaddr_from_ip_port(const char *host, uint16_t port, struct sockaddr_storage *ss);

/* Fills *ss for host and port: an IP literal, or a host name resolved now (getaddrinfo):
 * its first IPv4 address, else its first IPv6 one, as HAProxy binds a name. Returns 0, or
 * -EINVAL with the resolver's reason in err. */
int sockaddr_resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, char *err, size_t errlen);

/* Writes the address (without port) of sa as text. Returns buf, or "" when unknown or when
 * buflen is too small (an IPv4 address needs INET_ADDRSTRLEN, an IPv6 one INET6_ADDRSTRLEN). */
const char *sockaddr_to_text(const struct sockaddr *sa, char *buf, size_t buflen);

/* The client named by an X-Forwarded-For list that a trusted peer sent: the right-most
 * address that is not itself in the n trusted ranges (or the left-most, when all are).
 * Items are trimmed of spaces and tabs; empty ones are skipped. Writes it into out and
 * returns true, or returns false (out untouched) when the list has no item that fits. */
bool xff_client_address(const char *list, size_t len, const struct cidr *trusted, size_t n, char *out,
                        size_t outlen);
