#ifndef CCURLSHIM_H
#define CCURLSHIM_H

#include <curl/curl.h>

// Typed entry points for libcurl's variadic calls (Swift cannot call C `...` functions) and its macros.
// Every symbol is prefixed `uploadq_curl_`; nothing here holds state.

/// Read/write/header callbacks share one shape: (buffer, size, count, userdata) -> bytes handled.
typedef size_t (*uploadq_curl_data_callback)(char *buffer, size_t size, size_t count, void *userdata);
/// Seek callback: (userdata, offset, origin) -> CURL_SEEKFUNC_*.
typedef int (*uploadq_curl_seek_callback)(void *userdata, curl_off_t offset, int origin);
/// Progress callback: non-zero aborts the transfer.
typedef int (*uploadq_curl_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                                              curl_off_t ultotal, curl_off_t ulnow);

/// Socket callback: (userdata, socket, purpose) -> CURL_SOCKOPT_OK; called for every socket libcurl opens.
typedef int (*uploadq_curl_sockopt_callback)(void *userdata, curl_socket_t socket, curlsocktype purpose);
/// Pre-request callback: (userdata, peer address, local address, peer port, local port) -> CURL_PREREQFUNC_OK;
/// called each time a request is about to go out on a connection that is ready (libcurl 7.80 and later).
typedef int (*uploadq_curl_prereq_callback)(void *userdata, char *peer, char *local, int peerPort, int localPort);

CURLcode uploadq_curl_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode uploadq_curl_setopt_offset(CURL *handle, CURLoption option, curl_off_t value);
CURLcode uploadq_curl_setopt_string(CURL *handle, CURLoption option, const char *value);
CURLcode uploadq_curl_setopt_pointer(CURL *handle, CURLoption option, void *value);
CURLcode uploadq_curl_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value);
CURLcode uploadq_curl_setopt_data_callback(CURL *handle, CURLoption option, uploadq_curl_data_callback callback);
CURLcode uploadq_curl_setopt_seek_callback(CURL *handle, uploadq_curl_seek_callback callback);
CURLcode uploadq_curl_setopt_xferinfo_callback(CURL *handle, uploadq_curl_xferinfo_callback callback);
CURLcode uploadq_curl_setopt_sockopt_callback(CURL *handle, uploadq_curl_sockopt_callback callback);
CURLcode uploadq_curl_setopt_prereq_callback(CURL *handle, uploadq_curl_prereq_callback callback);

CURLcode uploadq_curl_getinfo_long(CURL *handle, CURLINFO info, long *value);
CURLcode uploadq_curl_getinfo_offset(CURL *handle, CURLINFO info, curl_off_t *value);
CURLcode uploadq_curl_getinfo_string(CURL *handle, CURLINFO info, const char **value);
CURLcode uploadq_curl_getinfo_pointer(CURL *handle, CURLINFO info, void **value);

CURLMcode uploadq_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value);

/// `msg->data.result` of a CURLMSG_DONE message (a union member).
CURLcode uploadq_curl_message_result(const CURLMsg *message);

/// Macros Swift cannot see.
size_t uploadq_curl_readfunc_abort(void);
size_t uploadq_curl_readfunc_pause(void);
/* Resumes a transfer paused by its read callback (curl_easy_pause with CURLPAUSE_CONT, a macro Swift cannot see). */
int uploadq_curl_unpause(void *handle);
int uploadq_curl_seekfunc_ok(void);
int uploadq_curl_seekfunc_fail(void);
int uploadq_curl_sockopt_ok(void);
int uploadq_curl_prereqfunc_ok(void);
int uploadq_curl_prereqfunc_abort(void);
long uploadq_curl_pipe_multiplex(void);
long uploadq_curl_global_default(void);
/// True when the linked libcurl has `feature` (a CURL_VERSION_* bit name: "http2", "asynchdns", "threadsafe").
int uploadq_curl_has_feature(const char *feature);

#endif
