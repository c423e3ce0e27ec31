"""A TCP listener on 127.0.0.1 that forwards each connection to a Unix socket, for tools that speak HTTP over TCP
alone (schemathesis against the control API). Prints its port, then serves until killed.

    python unix_bridge.py /path/to/api.sock
"""
import socket
import sys
import threading


def pipe(source, target):
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, target):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(sys.argv[1])
        except OSError:
            client.close()
            continue
        for source, target in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=(source, target), daemon=True).start()


if __name__ == "__main__":
    main()
