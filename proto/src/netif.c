/* Network interface of an address or of the route to one (see netif.h). */
#include "mkscope/netif.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool mks_netif_of_addr(const struct sockaddr *addr, char *name, size_t len)
{
    if (!addr || addr->sa_family != AF_INET)
        return false;
    in_addr_t a = ((const struct sockaddr_in *)(const void *)addr)->sin_addr.s_addr;
    struct ifaddrs *ifs = NULL;
    if (a == htonl(INADDR_ANY) || getifaddrs(&ifs) != 0)
        return false;
    bool found = false;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_name)
            continue;
        if (((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr.s_addr == a) {
            snprintf(name, len, "%s", i->ifa_name);
            found = true;
        }
    }
    freeifaddrs(ifs);
    return found;
}

bool mks_netif_toward(const struct sockaddr *peer, char *name, size_t len)
{
    if (!peer || peer->sa_family != AF_INET)
        return false;
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0)
        return false;
    struct sockaddr_in to = *(const struct sockaddr_in *)(const void *)peer, me;
    if (!to.sin_port)
        to.sin_port = htons(9); /* connect() wants one; nothing is sent */
    socklen_t ml = sizeof(me);
    bool ok = connect(s, (const struct sockaddr *)&to, sizeof(to)) == 0 &&
              getsockname(s, (struct sockaddr *)&me, &ml) == 0;
    close(s);
    return ok && mks_netif_of_addr((const struct sockaddr *)&me, name, len);
}
