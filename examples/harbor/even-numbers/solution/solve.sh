#!/bin/bash
awk '$1 % 2 == 0' numbers.txt > evens.txt
