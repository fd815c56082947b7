#!/bin/sh
# Start the token service, then run what the container was given (Harbor: sleep infinity).
python3 /opt/service/service.py &
exec "$@"
