#!/bin/bash
python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8765/token').read().decode())" > /app/token.txt
