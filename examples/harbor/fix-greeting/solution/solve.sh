#!/bin/bash
cp /solution/greet.sh /app/greet.sh
chmod +x /app/greet.sh
