#!/bin/bash
python3 -c "import os, urllib.request; print(urllib.request.urlopen(os.environ['API_URL'] + '/word').read().decode())" > /app/word.txt
