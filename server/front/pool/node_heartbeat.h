/* node_heartbeat.h — this node's heartbeat: every heartbeat_s seconds, the devices its
 * workers serve and its version go to the store (GET /v1/nodes reads them back, from every
 * node of the fleet), with the time. */
#ifndef NODE_HEARTBEAT_H
#define NODE_HEARTBEAT_H

/* Write one now, then one every period_s from a thread. 0, or -1. */
int node_heartbeat_start(int period_s);
void node_heartbeat_stop(void);

#endif
