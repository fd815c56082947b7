#!/bin/bash
printf '{"port": %s, "debug": false}\n' "$APP_PORT" > config/app.json
