#!/bin/bash
echo 'Ahoy from the forge crew!' > /app/greeting.txt
