#include "CCurlShim.h"

#include <string.h>

// Each wrapper passes one typed argument through libcurl's variadic setter/getter.

CURLcode uploadq_curl_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode uploadq_curl_setopt_offset(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode uploadq_curl_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode uploadq_curl_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode uploadq_curl_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode uploadq_curl_setopt_data_callback(CURL *handle, CURLoption option, uploadq_curl_data_callback callback) {
    return curl_easy_setopt(handle, option, callback);
}

CURLcode uploadq_curl_setopt_seek_callback(CURL *handle, uploadq_curl_seek_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_SEEKFUNCTION, callback);
}

CURLcode uploadq_curl_setopt_xferinfo_callback(CURL *handle, uploadq_curl_xferinfo_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, callback);
}

CURLcode uploadq_curl_setopt_sockopt_callback(CURL *handle, uploadq_curl_sockopt_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_SOCKOPTFUNCTION, callback);
}

CURLcode uploadq_curl_setopt_prereq_callback(CURL *handle, uploadq_curl_prereq_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_PREREQFUNCTION, callback);
}

CURLcode uploadq_curl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

CURLcode uploadq_curl_getinfo_offset(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}

CURLcode uploadq_curl_getinfo_string(CURL *handle, CURLINFO info, const char **value) {
    return curl_easy_getinfo(handle, info, value);
}

CURLcode uploadq_curl_getinfo_pointer(CURL *handle, CURLINFO info, void **value) {
    return curl_easy_getinfo(handle, info, value);
}

CURLMcode uploadq_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}

CURLcode uploadq_curl_message_result(const CURLMsg *message) {
    return message->data.result;
}

size_t uploadq_curl_readfunc_abort(void) { return CURL_READFUNC_ABORT; }
size_t uploadq_curl_readfunc_pause(void) { return CURL_READFUNC_PAUSE; }
int uploadq_curl_unpause(void *handle) { return (int)curl_easy_pause((CURL *)handle, CURLPAUSE_CONT); }
int uploadq_curl_seekfunc_ok(void) { return CURL_SEEKFUNC_OK; }
int uploadq_curl_seekfunc_fail(void) { return CURL_SEEKFUNC_FAIL; }
int uploadq_curl_sockopt_ok(void) { return CURL_SOCKOPT_OK; }
int uploadq_curl_prereqfunc_ok(void) { return CURL_PREREQFUNC_OK; }
int uploadq_curl_prereqfunc_abort(void) { return CURL_PREREQFUNC_ABORT; }
long uploadq_curl_pipe_multiplex(void) { return CURLPIPE_MULTIPLEX; }
long uploadq_curl_global_default(void) { return CURL_GLOBAL_DEFAULT; }

int uploadq_curl_has_feature(const char *feature) {
    const curl_version_info_data *info = curl_version_info(CURLVERSION_NOW);
    if (info == NULL || feature == NULL) return 0;
    if (strcmp(feature, "http2") == 0) return (info->features & CURL_VERSION_HTTP2) != 0;
    if (strcmp(feature, "asynchdns") == 0) return (info->features & CURL_VERSION_ASYNCHDNS) != 0;
    if (strcmp(feature, "threadsafe") == 0) return (info->features & CURL_VERSION_THREADSAFE) != 0;
    return 0;
}
