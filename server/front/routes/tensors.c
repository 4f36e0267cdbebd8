/* tensors.c — GET /v1/tensors, GET /v1/tensors/{id}, DELETE /v1/tensors/{id}
 * (docs/tensors.md). The upload and the download have files of their own (tensor_upload.c,
 * tensor_data.c).
 */
#include "server/front/routes/routes.h"

#include "common/proto.h"

#include <stdlib.h>
#include <unistd.h>

#include "server/front/pool/pool.h"
#include "server/front/tensors/tensor_io.h"
#include "server/front/tensors/tensor_table.h"

void route_tensor_list(http_request *req)
{
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "tensors");
    int n, i;
    tensor_entry *copy = tensor_table_snapshot(&n); /* the pool is asked without the table's lock */

    for (i = 0; i < n; i++)
        if (!copy[i].pending)
            cJSON_AddItemToArray(arr, tensor_entry_json(&copy[i], pool_device_generation(copy[i].device) != copy[i].generation));
    free(copy);
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}

void route_tensor_get(http_request *req)
{
    tensor_entry t;
    api_error e;
    cJSON *o;

    if (tensor_table_lookup(req->id, "id", &t, &e) != 0) {
        http_send_error(req, &e);
        return;
    }
    o = tensor_entry_json(&t, 0);
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}

void route_tensor_delete(http_request *req)
{
    tensor_entry t;
    api_error e;
    cJSON *msg, *reply = NULL, *o;
    int reply_fd = -1, gen, rc;

    rc = tensor_table_lookup(req->id, "id", &t, &e);
    if (rc != 0 && e.status != 410) {
        http_send_error(req, &e);
        return;
    }
    if (rc == 0 && tensor_table_begin_delete(t.id, &e) != 0) { /* 409 while runs read it */
        http_send_error(req, &e);
        return;
    }
    if (rc == 0) {
        msg = cJSON_CreateObject();
        cJSON_AddStringToObject(msg, "type", proto_type_name(PROTO_TENSOR_DELETE));
        cJSON_AddStringToObject(msg, "id", t.id);
        rc = tensor_exchange(t.device, msg, -1, &reply, &reply_fd, &gen, &e);
        cJSON_Delete(msg);
        cJSON_Delete(reply);
        if (reply_fd >= 0) close(reply_fd);
        if (rc != 0 && e.status != 410) {
            tensor_table_end_delete(t.id);
            http_send_error(req, &e);
            return;
        }
    }
    /* Deleted, or gone with its worker or an earlier server: either way it leaves the table
     * and the store's ids (later requests answer 404). */
    gen = rc == 0 ? pool_device_generation(t.device) : -1;
    tensor_table_forget(req->id, t.device, gen);
    if (rc != 0) {
        http_send_error(req, &e);
        return;
    }
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "deleted", t.id);
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}
