"""Runs OpenStack Placement (Debian's python3-placement) on SQLite with noauth2 on a loopback
port, through its WSGI application and wsgiref. Usage: placement_server.py <dir> <port>."""
import os
import sys
from wsgiref.simple_server import WSGIRequestHandler, make_server

directory, port = sys.argv[1], int(sys.argv[2])
os.makedirs(directory, exist_ok=True)
with open(os.path.join(directory, 'placement.conf'), 'w') as f:
    f.write(f"""[DEFAULT]
debug = False
[api]
auth_strategy = noauth2
[placement_database]
connection = sqlite:///{directory}/placement.db
sync_on_startup = True
""")
os.environ['OS_PLACEMENT_CONFIG_DIR'] = directory
sys.argv = sys.argv[:1]

from placement import wsgi  # noqa: E402

app = wsgi.init_application()


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


server = make_server('127.0.0.1', port, app, handler_class=Quiet)
print('listening', port, flush=True)
server.serve_forever()
