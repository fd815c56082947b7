#!/bin/sh
printf 'Hello, %s!\n' "$1"
