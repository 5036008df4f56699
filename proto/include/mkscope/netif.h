/*
 * Which network interface a transport should stay on.  UCX opens listening
 * sockets of its own on every interface unless told otherwise
 * (NET_DEVICES); the collector's UCX listener and the agents' UCX clients
 * keep them on the one interface their traffic uses, so that every socket a
 * program listens on is where its log says.
 */
#ifndef MKS_PROTO_NETIF_H
#define MKS_PROTO_NETIF_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* The interface holding the IPv4 address addr, into name; false for
 * 0.0.0.0 or an address no interface of this host has. */
bool mks_netif_of_addr(const struct sockaddr *addr, char *name, size_t len);

/* The interface this host would send from to reach the IPv4 address peer
 * (the routing decision of a connected UDP socket; nothing is sent). */
bool mks_netif_toward(const struct sockaddr *peer, char *name, size_t len);

#endif
